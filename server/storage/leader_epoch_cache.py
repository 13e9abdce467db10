"""The leader epoch cache of one partition: at which offset each leader epoch began.

Every v2 batch carries the epoch of the leader that appended it (``partition_leader_epoch``,
bytes 12..15 of the header, outside the CRC so that the leader stamps it). The cache keeps, per
epoch, the first offset written in it (Kafka's ``LeaderEpochFileCache``,
``storage/src/main/java/org/apache/kafka/storage/internals/epoch/LeaderEpochFileCache.java``)::

    epoch  start offset                     log:  [0 .. 99][100 ....... 1199][1200 ... LEO)
      0        0                                   epoch 0   epoch 2           epoch 3
      2      100
      3     1200

so that a follower that comes back after a leader change can ask the new leader "where did my
latest epoch end on your log?" (OffsetsForLeaderEpoch, KIP-101) and truncate to the answer
instead of to its high watermark, which can lose acknowledged records or keep divergent ones
(KIP-279 walks the epochs back until both logs agree). :meth:`LeaderEpochCache.end_offset_for`
is the leader's side of that question.

Rules (Kafka's, kept by :meth:`LeaderEpochCache.assign`): epochs and start offsets both strictly
increase along the entries; an epoch, once assigned, keeps its start offset unless an entry with
the same epoch and a *lower* offset arrives; a new entry whose epoch or offset is not above the
latest ones first removes the entries it conflicts with (from the end), since the log it
describes was truncated and rewritten. Truncating the log from the end or from the start
truncates the cache the same way (:meth:`truncate_from_end`, :meth:`truncate_from_start`).

The entries live in ``leader-epoch-checkpoint`` in the partition directory (its text format:
:mod:`stratalog.records.leader_epoch_checkpoint`), rewritten whole after every change through
:func:`~.durable.atomic_write`: a crash leaves the old file or the new, never a torn one. Kafka
writes it synchronously on assign and in the background after a truncation; here every change is
written before the call returns (a truncation is rare: a leader change or retention). Entries left
stale by a crash (above the log end, below the log start) are cut when the log is opened
(:func:`load_leader_epoch_cache`), as Kafka's loader does (Kafka LogLoader.load;
docs/kafka-behaviours.md#log-loading), and the batches are scanned when the file is missing or
unreadable, or when the log holds a batch of a later epoch than the file knows.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from .checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCheckpointFile
from .errors import CorruptCheckpointError
from .segments import Segments

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochCache",
    "load_leader_epoch_cache",
]

log = logging.getLogger(__name__)

# OffsetsForLeaderEpochResponse's "no such epoch" answer: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    """One leader epoch and the first offset written in it (Kafka's ``EpochEntry``)."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The ``epoch -> start offset`` entries of one partition, and their checkpoint file.

    Holds the entries in a list ordered by epoch, and the :class:`LeaderEpochCheckpointFile`
    they are written to (None: kept in memory only, for a loader's scratch work and tests).

    Invariants (:meth:`check`): epochs and start offsets are non-negative and both strictly
    increase along the list.

    Crash behaviour: every method that changes the entries rewrites the file before returning
    (atomically: old or new content after a crash). A failed write raises StorageIOError with
    the entries already changed in memory; the file then lags, which the next open repairs
    (the batches are the truth, see :func:`load_leader_epoch_cache`).

    Concurrency: not thread-safe; the owning :class:`PartitionLog` calls it under its lock.
    Lookups are O(log n) (bisect); assign and truncate_from_end O(removed entries);
    truncate_from_start O(n). n is the number of leader changes the log still holds.
    """

    def __init__(
        self,
        checkpoint: LeaderEpochCheckpointFile | None,
        entries: Iterable[tuple[int, int]] = (),
    ) -> None:
        """Start from ``entries`` (as read from a file), applied one by one with
        :meth:`assign`'s rules, as Kafka's constructor does; nothing is written.

        Raises:
            ValueError: a negative epoch or start offset among ``entries``.
        """
        self._checkpoint = checkpoint
        self._epochs: list[int] = []
        self._start_offsets: list[int] = []
        for epoch, start_offset in entries:
            self._assign(EpochEntry(epoch, start_offset))

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries!r})"

    # ---------------------------------------------------------------- reading

    @property
    def checkpoint(self) -> LeaderEpochCheckpointFile | None:
        return self._checkpoint

    @property
    def entries(self) -> list[EpochEntry]:
        """The entries, oldest epoch first (a copy)."""
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._start_offsets, strict=True)]

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_entry(self) -> EpochEntry | None:
        if not self._epochs:
            return None
        return EpochEntry(self._epochs[-1], self._start_offsets[-1])

    @property
    def latest_epoch(self) -> int | None:
        """The latest epoch that has an entry (the current leader's, on a leader), or None."""
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        if not self._epochs:
            return None
        return EpochEntry(self._epochs[0], self._start_offsets[0])

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The greatest epoch below ``epoch`` (default: below the latest one), or None."""
        if epoch is None:
            if not self._epochs:
                return None
            epoch = self._epochs[-1]
        index = bisect.bisect_left(self._epochs, epoch)
        return self._epochs[index - 1] if index > 0 else None

    def previous_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of the greatest epoch below ``epoch``, or None."""
        index = bisect.bisect_left(self._epochs, epoch)
        if index == 0:
            return None
        return EpochEntry(self._epochs[index - 1], self._start_offsets[index - 1])

    def next_epoch(self, epoch: int) -> int | None:
        """The least epoch above ``epoch``, or None."""
        index = bisect.bisect_right(self._epochs, epoch)
        return self._epochs[index] if index < len(self._epochs) else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly ``epoch``, or None."""
        index = bisect.bisect_left(self._epochs, epoch)
        if index < len(self._epochs) and self._epochs[index] == epoch:
            return EpochEntry(epoch, self._start_offsets[index])
        return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in: that of the last entry starting at
        or below it; None below the first entry."""
        index = bisect.bisect_right(self._start_offsets, offset)
        return self._epochs[index - 1] if index > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """The OffsetsForLeaderEpoch answer for ``requested_epoch``: ``(epoch, end offset)``
        (Kafka's ``endOffsetFor``, KIP-101/KIP-279).

        ``epoch`` is the greatest known epoch ``<= requested_epoch``, and ``end offset`` where
        it ended: the start offset of the first epoch above ``requested_epoch``, or
        ``log_end_offset`` when ``requested_epoch`` is the latest epoch (the current leader's,
        still being written). A ``requested_epoch`` below every known epoch answers
        ``(requested_epoch, first entry's start offset)``: its data was removed from this log,
        and the follower must truncate to where this log's known history begins.
        ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` when ``requested_epoch`` is undefined
        (-1), above the latest epoch, or the cache is empty: the follower then falls back to
        its high watermark.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            # Above every known epoch: cannot happen for a leader, whose latest epoch is its own.
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._start_offsets[0]
        return self._epochs[higher - 1], self._start_offsets[higher]

    def check(self) -> None:
        """Assert the invariants (tests call it after every mutation)."""
        assert len(self._epochs) == len(self._start_offsets)
        for index, (epoch, start_offset) in enumerate(
            zip(self._epochs, self._start_offsets, strict=True)
        ):
            assert epoch >= 0 and start_offset >= 0, (epoch, start_offset)
            if index:
                assert epoch > self._epochs[index - 1], self.entries
                assert start_offset > self._start_offsets[index - 1], self.entries

    # ---------------------------------------------------------------- changes

    def needs_assign(self, epoch: int, start_offset: int) -> bool:
        """Whether :meth:`assign` of these would change anything (O(1): an append asks this
        of every batch, and the answer is almost always no)."""
        if not self._epochs:
            return True
        return epoch != self._epochs[-1] or start_offset < self._start_offsets[-1]

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` began at ``start_offset``; True (and the file rewritten) if the
        entries changed.

        Nothing changes when ``epoch`` is the latest epoch and ``start_offset`` is not below its
        start (later batches of the current epoch). Otherwise entries whose epoch is ``>=
        epoch`` or whose start offset is ``>= start_offset`` are removed from the end first (a
        warning when that removes more than an entry at the same offset: the log was
        truncated and rewritten), then the entry is added.

        Raises:
            ValueError: a negative epoch or start offset (Kafka's IllegalArgumentException).
            StorageIOError: the checkpoint could not be written.
        """
        if not self._assign(EpochEntry(epoch, start_offset)):
            return False
        self._write()
        return True

    def assign_all(self, entries: Iterable[tuple[int, int]]) -> bool:
        """:meth:`assign` each entry in order, writing the file once; True if anything changed.

        Raises:
            ValueError, StorageIOError: as :meth:`assign` (entries before a bad one stay
                assigned in memory, and are written).
        """
        changed = False
        try:
            for epoch, start_offset in entries:
                changed = self._assign(EpochEntry(epoch, start_offset)) or changed
        finally:
            if changed:
                self._write()
        return changed

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid partition leader epoch entry {entry}: both must be >= 0")
        if not self.needs_assign(entry.epoch, entry.start_offset):
            return False
        removed: list[EpochEntry] = []
        while self._epochs and (
            self._epochs[-1] >= entry.epoch or self._start_offsets[-1] >= entry.start_offset
        ):
            removed.append(EpochEntry(self._epochs.pop(), self._start_offsets.pop()))
        self._epochs.append(entry.epoch)
        self._start_offsets.append(entry.start_offset)
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            # An entry at the same offset is an epoch that wrote nothing, replaced as expected.
            log.warning(
                "new epoch entry %s caused truncation of conflicting entries %s in %s; the "
                "cache now has %d entries", entry, removed, self._checkpoint, len(self._epochs),
            )
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove the entries starting at or above ``end_offset`` (the log was truncated to
        it); True (and the file rewritten) if any was. A negative ``end_offset``
        (UNDEFINED_EPOCH_OFFSET) does nothing, as in Kafka.

        Raises:
            StorageIOError: the checkpoint could not be written.
        """
        if end_offset < 0 or not self._start_offsets or self._start_offsets[-1] < end_offset:
            return False
        keep = bisect.bisect_left(self._start_offsets, end_offset)
        del self._epochs[keep:]
        del self._start_offsets[keep:]
        self._write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget what lies below ``start_offset`` (the log start moved up to it): the entries
        starting at or below it are removed, and the last of them is put back starting at
        ``start_offset`` (its epoch still holds the records there). True (and the file
        rewritten) if the entries changed. An entry starting exactly at ``start_offset`` stays
        as it is; a negative ``start_offset`` does nothing.

        Raises:
            StorageIOError: the checkpoint could not be written.
        """
        if start_offset < 0 or not self._start_offsets:
            return False
        removed = bisect.bisect_right(self._start_offsets, start_offset)
        if removed == 0:
            return False
        epoch = self._epochs[removed - 1]
        if removed == 1 and self._start_offsets[0] == start_offset:
            return False
        self._epochs[:removed] = [epoch]
        self._start_offsets[:removed] = [start_offset]
        self._write()
        return True

    def clear_and_flush(self) -> None:
        """Remove every entry and rewrite the file (empty): the log restarted at a new offset.

        Raises:
            StorageIOError: the checkpoint could not be written.
        """
        self._epochs.clear()
        self._start_offsets.clear()
        if self._checkpoint is not None and self._checkpoint.exists():
            self._write()

    def flush(self) -> None:
        """Rewrite the checkpoint file with the entries (after a load repaired them).

        Raises:
            StorageIOError: the checkpoint could not be written.
        """
        self._write()

    def _write(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(list(zip(self._epochs, self._start_offsets, strict=True)))


def load_leader_epoch_cache(
    directory: Path,
    segments: Segments,
    log_start_offset: int,
    log_end_offset: int,
) -> LeaderEpochCache:
    """The cache of the log in ``directory`` as of a just-loaded log: its checkpoint, repaired.

    Steps (Kafka's ``LogLoader`` keeps the first and the last; it rebuilds entries only from
    the segments it recovers):

    1. read ``leader-epoch-checkpoint``; a missing or unreadable file (a warning), or one
       holding entries the rules refuse, means the batches must be scanned from the start;
    2. cut the entries at or above ``log_end_offset`` (left by a crash after a truncation, or
       assigned just before a write the crash lost);
    3. scan batch headers for epochs (each batch whose epoch is above the latest known one
       starts an entry at its base offset): from the first segment when step 1 says so, and
       otherwise only if the last batch of the log carries an epoch above the latest entry
       (the file lags the log), from the latest entry's start offset. A log written by one
       leader (every stratalog single-server log, epoch 0) scans one batch header here;
    4. cut the entries below ``log_start_offset`` (Kafka LogLoader.load;
       docs/kafka-behaviours.md#log-loading);

    and write the file if the entries differ from what it held (nothing is written for an
    empty log without a file).

    Raises:
        StorageIOError: the file cannot be read (other than missing) or written, or a segment
            cannot be read.
    """
    checkpoint = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT_FILE)
    existed = checkpoint.exists()
    read: list[tuple[int, int]] = []
    scratch: LeaderEpochCache | None = None
    if existed:
        try:
            read = checkpoint.read()
            scratch = LeaderEpochCache(None, read)
        except (CorruptCheckpointError, ValueError) as exc:
            log.warning("rebuilding the leader epoch cache of %s from its batches: %s",
                        directory, exc)
            read = [(-1, -1)]  # differs from any entries: the file is rewritten
    scan_from: int | None
    if scratch is None:
        scratch = LeaderEpochCache(None)
        scan_from = log_start_offset
    else:
        scratch.truncate_from_end(log_end_offset)
        scan_from = None
        last_epoch = _last_batch_epoch(segments, log_start_offset, log_end_offset)
        latest = scratch.latest_entry
        if last_epoch is not None and (latest is None or last_epoch > latest.epoch):
            log.warning(
                "leader epoch checkpoint of %s ends at %s but the log holds a batch of epoch "
                "%d: scanning the batches", directory, latest, last_epoch,
            )
            scan_from = log_start_offset if latest is None else latest.start_offset
    if scan_from is not None and scan_from < log_end_offset:
        scratch.assign_all(_epoch_starts(segments, scratch, scan_from, log_end_offset))
    scratch.truncate_from_start(log_start_offset)
    cache = LeaderEpochCache(checkpoint, scratch.entries)
    entries = [(entry.epoch, entry.start_offset) for entry in cache.entries]
    if entries != read and (entries or existed):
        cache.flush()
    return cache


def _last_batch_epoch(segments: Segments, log_start_offset: int, log_end_offset: int) -> int | None:
    """The leader epoch of the log's last batch (None: empty log, or none with an epoch)."""
    if log_end_offset <= log_start_offset:
        return None
    segment = segments.floor_segment(log_end_offset - 1)
    while segment is not None:
        found = segment.translate_offset(log_end_offset - 1)
        position = 0 if found is None else found.position
        last = None
        for header in segment.iter_batch_headers(position):
            last = header
        if last is not None:
            return last.partition_leader_epoch if last.partition_leader_epoch >= 0 else None
        # An empty segment (a roll at the end): the last batch is in an earlier one.
        segment = segments.lower_segment(segment.base_offset)
    return None


def _epoch_starts(
    segments: Segments, cache: LeaderEpochCache, start_offset: int, end_offset: int
) -> list[tuple[int, int]]:
    """``(epoch, base offset)`` of each batch in ``[start_offset, end_offset)`` whose epoch is
    above every epoch before it (Kafka's recovery: ``assign`` when the batch's epoch is above
    the latest). Headers only; the segments' own framing stops at a torn tail."""
    latest = cache.latest_epoch
    starts: list[tuple[int, int]] = []
    segment = segments.floor_segment(start_offset) or segments.first
    while segment is not None and segment.base_offset < end_offset:
        position = 0
        if start_offset > segment.base_offset:
            found = segment.translate_offset(start_offset)
            if found is None:
                segment = segments.higher_segment(segment.base_offset)
                continue
            position = found.position
        for header in segment.iter_batch_headers(position):
            if header.base_offset >= end_offset:
                break
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                starts.append((epoch, header.base_offset))
                latest = epoch
        segment = segments.higher_segment(segment.base_offset)
    return starts

