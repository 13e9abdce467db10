"""The mmap mechanics shared by the offset index and the time index (Kafka's ``AbstractIndex``).

An index file is a flat array of fixed-size, big-endian entries with no header and no checksum;
slot ``n`` lives at byte ``n * entry_size``. Both kinds are sparse: a segment writes one entry
every ``index.interval.bytes`` of log, and the indexes only narrow the forward scan of the log.

Life of a file::

    created   -> length = floor(max_index_size_bytes / entry_size) * entry_size, all zeros
                 (sparse), mapped, entries = 0; appends fill slots from the front
    trimmed   -> on roll, close and end of recovery the file is cut to entries * entry_size
    reopened  -> entries = length // entry_size, every entry trusted blindly (a preallocated
                 file that was never trimmed looks full of (base_offset, 0) entries; recovery,
                 not this class, repairs that)
    re-grown  -> the active segment's indexes are resized back to max_index_size_bytes after
                 load and after truncation, so that they are not "full" at once

Lookups are searches with Kafka's warm section (Kafka AbstractIndex.indexSlotRangeFor;
docs/kafka-behaviours.md#index-lookups): the last ``8192 // entry_size`` entries cover the pages
that in-sync readers touch, so a search whose target is past the first warm entry stays inside them
and never faults in cold pages from the middle of the file. Within the section chosen, an
interpolation search (guided by the near-linear growth of a sparse index's keys) reads two or three
entries where a binary search reads ten to twenty. The answers are those of a plain binary search;
only the entries and pages touched differ.

Python's ``mmap`` cannot map a zero-length file, so an index of length 0 simply has no map.
"""

from __future__ import annotations

import abc
import logging
import mmap
import os
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, TypeVar

from . import space
from .errors import (
    CorruptIndexError,
    InvalidConfigError,
    LogClosedError,
    OffsetOverflowError,
    StorageIOError,
)

__all__ = ["INT32_MAX", "WARM_SECTION_BYTES", "Column", "Index"]

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
# Bytes at the end of an index that lookups try first (Kafka's 8192: three entries touch every
# page of it on a 4 KiB-page machine, so in-sync lookups keep exactly those pages warm).
WARM_SECTION_BYTES = 8192
_MADV_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)  # absent where madvise is
# The blocks of a sparse index are reserved this many bytes at a time, before entries go there.
_RESERVE_BYTES = 64 * 1024

T = TypeVar("T")


class Column(NamedTuple):
    """One searchable field of an entry: its format, its byte offset inside the entry, and
    whether it stores ``offset - base_offset`` (searches then compare relative values)."""

    fmt: struct.Struct
    field_offset: int
    relative: bool


# Parses slot n of the map into whatever the caller wants back.
Parser = Callable[[mmap.mmap, int], T]


@contextmanager
def _io_errors(path: Path, action: str) -> Iterator[None]:
    """Turn an ``OSError`` into a :class:`StorageIOError` that names the file and the action."""
    try:
        yield
    except OSError as exc:
        raise StorageIOError(f"failed to {action} index file {path}: {exc}") from exc


class Index(abc.ABC):
    """A fixed-entry-size index file, memory-mapped; the base of OffsetIndex and TimeIndex.

    Holds: the path, the segment's ``base_offset``, ``max_index_size_bytes`` (the size a new or
    reset file is preallocated to), the open file descriptor and its map, and ``entries``, the
    number of slots in use. Slots ``[0, entries)`` hold entries; ``[entries, max_entries)`` are
    free (zeros in a fresh file, stale entries after a truncation).

    Invariants: ``0 <= entries <= max_entries == length_bytes // entry_size``; the map (absent
    when ``length_bytes == 0``) covers the whole file; subclasses keep their keys sorted.

    Crash behaviour: nothing is checksummed and nothing is fsynced except by :meth:`flush`. After
    a crash the file may be untrimmed (preallocated zeros count as entries when reopened) or
    miss recent entries; the segment's recovery rebuilds the index from the ``.log``.

    Concurrency: not thread-safe for writers. One writer at a time (PartitionLog serialises
    appends, truncations, resizes, renames and close). Lookups may run concurrently from reader
    threads: they read ``entries`` once and never read past it, and writers put an entry's bytes
    in place before they count it, so a lookup never sees a half-written entry. A lock is held
    by lookups and by every operation that replaces or drops the map (resize, close, delete), so
    a lookup never reads a map that is being unmapped. Lookups racing a truncation may still see
    the entries being truncated away.
    """

    ENTRY_SIZE: int = 0  # bytes per entry; set by each subclass
    # The warm section searched first; a class attribute so that tests can shrink it and run
    # the cold branch of the search on small indexes.
    warm_section_bytes: int = WARM_SECTION_BYTES

    def __init__(self, path: Path | str, base_offset: int, max_index_size_bytes: int) -> None:
        """Open the index at ``path``, creating and preallocating it if it does not exist.

        Raises:
            InvalidConfigError: the file is new and ``max_index_size_bytes`` is smaller than one
                entry (Kafka's "Invalid max index size").
            StorageIOError: the file cannot be created, opened, sized or mapped.
        """
        assert self.ENTRY_SIZE > 0, "Index is abstract: use OffsetIndex or TimeIndex"
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size_bytes = max_index_size_bytes
        self._remap_lock = threading.Lock()
        self._fd: int | None = None
        self._mmap: mmap.mmap | None = None
        self._closed = False

        with _io_errors(self._path, "open"):
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR)
                newly_created = False
        try:
            if newly_created:
                if max_index_size_bytes < self.ENTRY_SIZE:
                    raise InvalidConfigError(
                        f"invalid max index size {max_index_size_bytes} bytes for {self._path}: "
                        f"must hold at least one {self.ENTRY_SIZE}-byte entry"
                    )
                with _io_errors(self._path, "preallocate"):
                    os.ftruncate(fd, self._round_down(max_index_size_bytes))
            with _io_errors(self._path, "stat"):
                length = os.fstat(fd).st_size
            self._fd = fd
            self._length_bytes = length
            with _io_errors(self._path, "map"):
                self._map(used_bytes=0 if newly_created else length)
        except BaseException:
            os.close(fd)
            self._fd = None
            if newly_created:
                # Leave no half-made file behind for the next open to trust.
                self._path.unlink(missing_ok=True)
            raise
        self._max_entries = length // self.ENTRY_SIZE
        # A new file starts empty; an existing one is trusted blindly (Kafka AbstractIndex;
        # docs/kafka-behaviours.md#index-files-mechanics).
        self._entries = 0 if newly_created else self._max_entries
        # Bytes from the start known to have their blocks (see _write_entry); None: the file
        # system cannot reserve, do not ask.
        self._reserved_bytes: int | None = 0 if newly_created else length
        log.debug(
            "opened index %s: base offset %d, %d bytes, %d entries, newly created %s",
            self._path,
            base_offset,
            length,
            self._entries,
            newly_created,
        )

    # ---------------------------------------------------------------------------- properties

    @property
    def path(self) -> Path:
        """The file that backs this index (changes on :meth:`rename_to`)."""
        return self._path

    @property
    def base_offset(self) -> int:
        """The base offset of the segment; entries store offsets relative to it."""
        return self._base_offset

    @property
    def max_index_size_bytes(self) -> int:
        """The size a new or reset file is preallocated to (``segment.index.bytes``)."""
        return self._max_index_size_bytes

    @property
    def entries(self) -> int:
        """Slots in use."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """Slots the file has room for: ``length_bytes // entry_size``."""
        return self._max_entries

    @property
    def length_bytes(self) -> int:
        """The current length of the file (preallocated, so usually more than the used bytes)."""
        return self._length_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes actually used by entries: ``entries * entry_size``."""
        return self._entries * self.ENTRY_SIZE

    @property
    def is_full(self) -> bool:
        """True iff no slot is free (a full index makes the log roll a new segment)."""
        return self._entries >= self._max_entries

    @property
    def is_closed(self) -> bool:
        """True after :meth:`close` or :meth:`delete_if_exists`."""
        return self._closed

    # ------------------------------------------------------------------------ offset helpers

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``, which must fit an int32 entry field.

        Raises:
            OffsetOverflowError: the difference is negative or above 2^31 - 1.
        """
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            raise OffsetOverflowError(
                f"offset {offset} is not in [{self._base_offset}, "
                f"{self._base_offset + INT32_MAX}] and cannot be indexed in {self._path} "
                f"(base offset {self._base_offset})"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """True iff ``offset`` is representable relative to this index's base offset."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    # ------------------------------------------------------------------------------- sizing

    def resize(self, new_size_bytes: int) -> bool:
        """Set the file length to ``new_size_bytes`` rounded down to whole entries; remap.

        Keeps the entries. Unlike Kafka (which fails on it), a size below the bytes in use is
        raised to exactly those bytes, so no entry is ever dropped by a resize; the index is then
        full and the log rolls.

        Returns:
            False if the length was already that (nothing done), True if the file changed.
        Raises:
            StorageIOError: the file cannot be truncated/extended or remapped.
        """
        self._ensure_open()
        rounded = self._round_down(max(new_size_bytes, 0))
        rounded = max(rounded, self._entries * self.ENTRY_SIZE)
        if rounded == self._length_bytes:
            log.debug("index %s not resized: already %d bytes", self._path, rounded)
            return False
        assert self._fd is not None
        with self._remap_lock:
            # Unmap, set the length, map again (mremap is not portable, and Python's
            # mmap.resize refuses while any buffer export is alive).
            self._unmap()
            with _io_errors(self._path, f"resize to {rounded} bytes"):
                os.ftruncate(self._fd, rounded)
                self._length_bytes = rounded
                self._map(used_bytes=self._entries * self.ENTRY_SIZE)
            self._max_entries = rounded // self.ENTRY_SIZE
            if self._reserved_bytes is not None:
                # The used entries' pages have blocks; a grown tail is a hole.
                used = self._entries * self.ENTRY_SIZE
                self._reserved_bytes = min(self._reserved_bytes, used - used % _RESERVE_BYTES)
        log.debug(
            "resized index %s to %d bytes (%d of %d slots used)",
            self._path,
            rounded,
            self._entries,
            self._max_entries,
        )
        return True

    def trim_to_valid_size(self) -> bool:
        """Cut the file to exactly the used entries (on roll, close and after recovery)."""
        return self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Drop every entry and grow the file back to ``max_index_size_bytes``."""
        self.truncate()
        self.resize(self._max_index_size_bytes)

    def truncate(self) -> None:
        """Drop every entry (the file keeps its length)."""
        self._truncate_to_entries(0)

    @abc.abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is ``>= offset``; a no-op past the last entry."""

    def sanity_check(self) -> None:
        """Detect obvious corruption (Kafka's ``sanityCheck``): here, a partial trailing entry.

        Raises:
            CorruptIndexError: the file length is not a multiple of the entry size.
        """
        if self._length_bytes % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"index file {self._path} is corrupt: found {self._length_bytes} bytes, "
                f"which is not a multiple of the {self.ENTRY_SIZE}-byte entry size"
            )

    # ------------------------------------------------------------------------ file handling

    def flush(self) -> None:
        """Write the mapped pages to disk and wait (``msync(MS_SYNC)``)."""
        self._ensure_open()
        with self._remap_lock:
            if self._mmap is not None:
                with _io_errors(self._path, "flush"):
                    self._mmap.flush()

    def close(self) -> None:
        """Trim to the used entries, unmap and close the file. Idempotent."""
        if self._closed:
            return
        self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        """Unmap and close the file without trimming it (Kafka's ``closeHandler``). Idempotent.

        For a failed disk, where writing is pointless, and for :meth:`delete_if_exists`. The
        file keeps its preallocated length, so reopening it counts the zero slots as entries.
        """
        with self._remap_lock:
            self._unmap()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._closed = True

    def rename_to(self, path: Path | str) -> None:
        """Rename the backing file atomically (mapped or not); the index follows the new name.

        The path is updated even when the rename fails, as in Kafka, so that a later delete acts
        on the name the caller meant.

        Raises:
            StorageIOError: the rename failed (for example, the file does not exist).
        """
        target = Path(path)
        try:
            with _io_errors(self._path, f"rename to {target}"):
                os.replace(self._path, target)
        finally:
            self._path = target

    def update_parent_dir(self, parent_dir: Path | str) -> None:
        """Point at the same file name in ``parent_dir`` (after the directory was renamed)."""
        self._path = Path(parent_dir) / self._path.name

    def delete_if_exists(self) -> bool:
        """Unmap and close, then delete the file.

        Returns:
            True if this call deleted the file, False if it did not exist.
        """
        self.close_handler()
        with _io_errors(self._path, "delete"):
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
        return True

    # ------------------------------------------------------------------ for the subclasses

    def _round_down(self, size_bytes: int) -> int:
        return size_bytes - size_bytes % self.ENTRY_SIZE

    def _ensure_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"index {self._path} is closed")

    def _map(self, *, used_bytes: int) -> None:
        """Map the whole file, or nothing when it is empty (mmap refuses a zero length).

        ``used_bytes`` is how much of the file holds entries. A map with an unused (sparse,
        preallocated) tail is advised MADV_RANDOM: with the default advice the first write into
        the holes made the kernel read ahead ``read_ahead_kb`` of them (thousands of zero
        pages, milliseconds, inside the append after every roll; docs/performance.md has the
        measurement), where an append needs one page. A trimmed index keeps the default
        advice: its read faults map neighbouring cached pages too (fault-around), which
        MADV_RANDOM would turn off.
        """
        assert self._fd is not None
        if self._length_bytes > 0:
            self._mmap = mmap.mmap(self._fd, self._length_bytes, access=mmap.ACCESS_WRITE)
            if _MADV_RANDOM is not None and used_bytes < self._length_bytes:
                self._mmap.madvise(_MADV_RANDOM)
        else:
            self._mmap = None

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def _write_entry(self, slot: int, entry_bytes: bytes) -> None:
        """Put an entry's bytes in ``slot`` (the caller counts it only afterwards).

        The preallocated file is sparse: before the first entry of each ``_RESERVE_BYTES``
        the blocks are reserved (:func:`space.reserve`), so that a full disk is an error here,
        not a SIGBUS from the map write (one system call per 8,192 offset entries).

        Raises:
            StorageIOError: the blocks could not be reserved (nothing was written).
        """
        assert self._mmap is not None and len(entry_bytes) == self.ENTRY_SIZE
        start = slot * self.ENTRY_SIZE
        end = start + self.ENTRY_SIZE
        reserved = self._reserved_bytes
        if reserved is not None and end > reserved:
            self._reserve(reserved, end)
        self._mmap[start:end] = entry_bytes

    def _reserve(self, reserved: int, end: int) -> None:
        assert self._fd is not None
        chunk_end = min(self._length_bytes, -(-end // _RESERVE_BYTES) * _RESERVE_BYTES)
        with _io_errors(self._path, f"reserve {chunk_end - reserved} bytes of"):
            supported = space.reserve(self._fd, reserved, chunk_end - reserved)
        self._reserved_bytes = chunk_end if supported else None

    def _truncate_to_entries(self, entries: int) -> None:
        """Keep the first ``entries`` entries; subclasses refresh their cached last entry."""
        self._ensure_open()
        self._entries = entries

    def _largest_lower_bound(self, target: int, column: Column, parse: Parser[T]) -> T | None:
        """Parse the entry with the largest ``column`` value ``<= target``; None if none.

        The search and the parse happen under the remap lock with one reading of ``entries``, so
        a concurrent append, truncation or resize cannot make them disagree. Assumes the column
        is strictly increasing (with equal values it returns one of them; an unsorted, corrupt
        column gives some slot, never an error). See :func:`_interpolation_search`.
        """
        fmt, field, relative = column
        unpack = fmt.unpack_from
        stride = self.ENTRY_SIZE
        if relative:
            target -= self._base_offset
        with self._remap_lock:
            if self._closed:
                self._ensure_open()
            n = self._entries
            if n == 0:
                return None
            mm = self._mmap
            assert mm is not None
            first_warm = n - 1 - self.warm_section_bytes // stride
            if first_warm < 0:
                first_warm = 0
            known = unpack(mm, first_warm * stride + field)[0]
            if known < target:
                lo, hi = first_warm, n - 1
            else:
                known = unpack(mm, field)[0]
                if known > target:
                    return None
                lo, hi = 0, first_warm
            slot = _interpolation_search(mm, unpack, stride, field, target, lo, known, hi)
            return parse(mm, slot)

    def _smallest_upper_bound(self, target: int, column: Column, parse: Parser[T]) -> T | None:
        """Parse the entry with the smallest ``column`` value ``>= target``; None if none.

        Same locking as :meth:`_largest_lower_bound`. With equal column values it finds the
        first of them, so it also serves columns that are only non-decreasing.
        """
        unpack, field, stride = column.fmt.unpack_from, column.field_offset, self.ENTRY_SIZE
        if column.relative:
            target -= self._base_offset
        with self._remap_lock:
            self._ensure_open()
            n = self._entries
            if n == 0:
                return None
            mm = self._mmap
            assert mm is not None
            first_warm = max(0, n - 1 - self.warm_section_bytes // stride)
            if unpack(mm, first_warm * stride + field)[0] < target:
                # Everything up to first_warm is below the target: look only past it.
                lo, hi = first_warm + 1, n
            elif unpack(mm, field)[0] >= target:
                return parse(mm, 0)
            else:
                lo, hi = 1, first_warm
            # Invariant: column[lo - 1] < target; column[hi] >= target (hi == n: none found).
            while lo < hi:
                mid = (lo + hi) >> 1
                if unpack(mm, mid * stride + field)[0] < target:
                    lo = mid + 1
                else:
                    hi = mid
            return parse(mm, lo) if lo < n else None

    def _read_slot(self, slot: int, parse: Parser[T]) -> T:
        """Parse ``slot`` under the remap lock.

        Raises:
            ValueError: ``slot`` is negative or not below ``entries``.
        """
        with self._remap_lock:
            self._ensure_open()
            n = self._entries
            if not 0 <= slot < n:
                raise ValueError(
                    f"attempt to fetch entry {slot} from index {self._path}, which has {n} entries"
                )
            assert self._mmap is not None
            return parse(self._mmap, slot)

    def _read_all(self, parse: Parser[T]) -> list[T]:
        """Parse every entry in slot order, under one hold of the remap lock."""
        with self._remap_lock:
            self._ensure_open()
            n = self._entries
            mm = self._mmap
            return [parse(mm, slot) for slot in range(n)]  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )


def _interpolation_search(
    mm: mmap.mmap,
    unpack: Callable[[mmap.mmap, int], tuple[int, ...]],
    stride: int,
    field: int,
    target: int,
    lo: int,
    value_at_lo: int,
    hi: int,
) -> int:
    """The largest slot in ``[lo, hi]`` whose column value is ``<= target``, given that the
    value at ``lo`` (``value_at_lo``) is.

    A sparse index writes an entry every ``index.interval.bytes`` of log, so its offsets (and
    its timestamps, under a steady load) grow almost linearly with the slot: a guess placed
    where ``target`` falls between the values at ``lo`` and ``hi`` usually lands on the answer,
    and two or three reads of the map find what a binary search needs log2(entries) reads
    (10 to 20) for. Every guess is followed by one bisection step, so a skewed column costs at
    most about twice a binary search. The answer is the binary search's for a strictly
    increasing column; for any column (a corrupt index, or entries rewritten by a truncation
    and appends that race the lookup) the loop ends and returns a slot in ``[lo, hi]``.
    """
    while lo < hi:
        value_at_hi = unpack(mm, hi * stride + field)[0]
        if value_at_hi <= target:
            return hi
        # value_at_lo <= target < value_at_hi, so the guess lies in [lo, hi - 1].
        guess = lo + (target - value_at_lo) * (hi - lo) // (value_at_hi - value_at_lo)
        if unpack(mm, guess * stride + field)[0] > target:
            hi = guess - 1
        else:
            after_guess = unpack(mm, (guess + 1) * stride + field)[0]
            if after_guess > target:
                return guess
            lo, value_at_lo = guess + 1, after_guess
        if lo < hi:
            mid = (lo + hi + 1) >> 1
            value_at_mid = unpack(mm, mid * stride + field)[0]
            if value_at_mid <= target:
                lo, value_at_lo = mid, value_at_mid
            else:
                hi = mid - 1
    return lo
