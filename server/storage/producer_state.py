"""Producer state of one partition: Kafka's ``ProducerStateManager`` and ``ProducerAppendInfo``.

An idempotent producer stamps every batch with its producer id, epoch and base sequence. Per
partition the log keeps, for each producer id, its epoch, the metadata of its last 5 batches
(first and last sequence, last offset, offset delta, timestamp), the epoch of the transaction
coordinator that last wrote a marker for it, and the first offset of its open transaction. From
that state an append is judged before anything is written (:meth:`ProducerStateManager.prepare`):

    the batch repeats one of the producer's last 5 (same epoch,       duplicate: acknowledge with
      same first and last sequence)                                   the ORIGINAL offsets
    epoch below the producer's                                        InvalidProducerEpochError
    epoch above the producer's (a bump) and sequence != 0             OutOfOrderSequenceError
    same epoch, sequence != last + 1 (0 follows Int32.MAX: a wrap)    OutOfOrderSequenceError
    producer unknown (never seen, or expired) and sequence != 0       UnknownProducerIdError
    non-transactional batch while the producer's transaction is open  InvalidTxnStateError
    marker from a coordinator epoch below the producer's              TransactionCoordinatorFencedError

A transactional batch opens a transaction at its first offset unless one is open; a COMMIT or
ABORT marker closes it (:class:`CompletedTxn`). The first offset of the earliest open transaction
is the *first unstable offset*; the last stable offset (LSO) is that, or the log end offset.
Those rules are :mod:`stratalog.records.transaction_replay`'s (:class:`TransactionReplay`), the
one replay of transactions that recovery (:meth:`ProducerStateManager.load_batches`) and the
Spark connector's file mode both run.

Snapshot files (``<20-digit offset>.snapshot``, byte layout in
:mod:`stratalog.records.producer_snapshot`, Kafka's ``ProducerSnapshot``) hold the state as of
(exclusive) that offset: one entry per producer with its LAST batch only, as Kafka's (none
at all in the 10-byte snapshot of a log without producers). They are written atomically
(temporary file, rename) on every roll, whatever the producers (fsynced later, by the flush
that moves the recovery point past the roll: :meth:`ProducerStateManager.flush_snapshot`),
and on clean close (fsynced), and read at open. A snapshot that does not parse, has a version
other than 1 or whose CRC does not match is deleted with a warning naming the file and why (as
Kafka does), and an older one (or the log itself) is used instead.

Differences from Kafka, on purpose: after a load the batches before each producer's last one
come back from a replay of the log's tail (:meth:`ProducerStateManager.restore_batch_history`),
so a resend of any of its last 5 is still a duplicate after a restart. An append may hold several batches (stratalog's Produce
takes "one or more"): either every batch of it is a duplicate (acknowledged with the original
offsets of the first and the last) or none is; a mix is refused as out of order. A producer
unknown to the log with a non-zero sequence is refused with UNKNOWN_PRODUCER_ID (Kafka before
KIP-360; trunk accepts it), which the issue asks for: a producer whose state expired learns so.

Concurrency: not thread-safe; the :class:`~stratalog.server.storage.partition_log.PartitionLog`
owns one and uses it under its lock. :meth:`prepare` computes without mutating, so a failed write
leaves the state as it was; :meth:`apply` then records what was written.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from stratalog.records.batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    SEQUENCE_MAX,
    decrement_sequence,
    increment_sequence,
)
from stratalog.records.control import ControlRecordType
from stratalog.records.errors import CorruptSnapshotError
from stratalog.records.file_names import SNAPSHOT_FILE_SUFFIX
from stratalog.records.producer_snapshot import (
    ProducerSnapshotEntry,
    pack_producer_snapshot,
    unpack_producer_snapshot,
)
from stratalog.records.transaction_replay import CompletedTxn, TransactionReplay

from .durable import atomic_write
from .errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    StorageIOError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from .files import offset_from_file_name, producer_snapshot_file

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CompletedTxn",
    "DuplicateAppend",
    "ProducerAppend",
    "ProducerBatch",
    "ProducerStateEntry",
    "ProducerStateManager",
    "decrement_sequence",
    "increment_sequence",
    "list_snapshot_offsets",
]

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
INT32_MAX = SEQUENCE_MAX
NO_TXN = -1  # current_txn_first_offset when no transaction is open (the snapshot's -1)


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


class BatchMetadata(NamedTuple):
    """One appended batch of a producer (Kafka's ``BatchMetadata``)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerBatch(NamedTuple):
    """What the producer state needs of one batch being appended (or scanned), offsets assigned.

    ``control_type`` is ABORT or COMMIT for a transaction marker (with ``coordinator_epoch``),
    None for a data batch.
    """

    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool
    control_type: ControlRecordType | None = None
    coordinator_epoch: int = -1

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset - self.first_offset)


@dataclass(slots=True)
class ProducerStateEntry:
    """The state of one producer id (Kafka's ``ProducerStateEntry``).

    ``batches`` holds at most :data:`NUM_BATCHES_TO_RETAIN`, oldest first. Mutable; copied by
    :meth:`copy` before an append changes it, so that a refused append changes nothing.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_TXN
    last_timestamp: int = -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.current_txn_first_offset,
            self.last_timestamp,
        )

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        """Record a batch; a new epoch forgets the batches of the old one (``maybeUpdateProducerEpoch``)."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate_batch(self, batch: ProducerBatch) -> BatchMetadata | None:
        """One of the retained batches with the same epoch and sequence range, if any."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        first_seq, last_seq = batch.base_sequence, batch.last_sequence
        for metadata in self.batches:
            if metadata.first_seq == first_seq and metadata.last_seq == last_seq:
                return metadata
        return None

    def to_snapshot_entry(self) -> ProducerSnapshotEntry:
        last = self.batches[-1] if self.batches else BatchMetadata(NO_SEQUENCE, -1, 0, -1)
        return ProducerSnapshotEntry(
            self.producer_id, self.producer_epoch, last.last_seq, last.last_offset,
            last.offset_delta, self.last_timestamp, self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot_entry(cls, entry: ProducerSnapshotEntry) -> ProducerStateEntry:
        state = cls(
            entry.producer_id,
            entry.producer_epoch,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_first_offset=entry.current_txn_first_offset,
            last_timestamp=entry.timestamp,
        )
        if entry.last_offset >= 0:
            state.batches.append(BatchMetadata(
                entry.last_sequence, entry.last_offset, entry.offset_delta, entry.timestamp
            ))
        return state


class DuplicateAppend(NamedTuple):
    """An append whose batches were all appended before: the original offsets, nothing to write."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerAppend:
    """The state changes an accepted append makes, computed by :meth:`ProducerStateManager.prepare`
    and applied by :meth:`ProducerStateManager.apply` once the bytes are written."""

    entries: dict[int, ProducerStateEntry]
    started_txns: tuple[tuple[int, int], ...]  # (producer id, first offset)
    completed_txns: tuple[CompletedTxn, ...]
    end_offset: int  # the log end offset after the append

    @property
    def is_empty(self) -> bool:
        return not self.entries


class ProducerStateManager:
    """The producer state of one partition, and its ``.snapshot`` files in ``directory``.

    Holds: the entry of every producer id, the open transactions (producer id by first offset),
    ``map_end_offset`` (the state reflects every batch below it) and the expiration setting.

    Invariants: each open transaction's first offset is its producer's
    ``current_txn_first_offset``; ``first_unstable_offset`` is the least of them.

    Crash behaviour: the state lives in memory; snapshots are written whole through a
    temporary file and a rename (fsynced when asked), so a crash leaves the old file set or the
    new; a power loss before the fsync may leave a torn one, which its CRC rejects. Recovery
    rebuilds the state from the latest readable snapshot plus a scan of the log after it, or
    from the log start when there is none (``recovery.py``).

    Concurrency: single-threaded: its :class:`PartitionLog` calls it under the log's lock
    (all but :meth:`flush_snapshot`, which touches no state).
    """

    def __init__(self, directory: Path, producer_id_expiration_ms: int) -> None:
        self._directory = Path(directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # The open transactions (the one replay of "open on data, close on marker", shared
        # with Spark's file mode); each mirrors its producer's current_txn_first_offset.
        self._txns = TransactionReplay()
        self._first_unstable: int | None = None
        self.map_end_offset = 0
        # A snapshot file was written or found: the clean close writes one even when no
        # producer is left, so that an older snapshot cannot bring back expired producers.
        self.snapshots_seen = False

    # ------------------------------------------------------------------- reading the state

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        """The entries by producer id (read-only for callers)."""
        return self._producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction; None when none is open."""
        return self._first_unstable

    @property
    def ongoing_txns(self) -> dict[int, int]:
        """Open transactions: first offset -> producer id (read-only for callers)."""
        return self._txns.ongoing

    def last_stable_offset_for(self, completed: CompletedTxn) -> int:
        """The LSO recorded with an aborted transaction: the first offset of the earliest other
        open transaction, or the marker's offset + 1 (Kafka ProducerStateManager.lastStableOffset;
        docs/kafka-behaviours.md#aborted-transactions)."""
        return self._txns.last_stable_offset_for(completed)

    # ------------------------------------------------------------------- appends

    def prepare(self, batches: Iterable[ProducerBatch], end_offset: int) -> ProducerAppend | DuplicateAppend:
        """Judge the producer batches of one append (the table in the module docstring).

        ``end_offset`` is the log end offset after the append. Changes nothing.

        Raises:
            OutOfOrderSequenceError, InvalidProducerEpochError, UnknownProducerIdError,
            InvalidTxnStateError, TransactionCoordinatorFencedError: the append is refused.
        """
        updated: dict[int, ProducerStateEntry] = {}
        started: list[tuple[int, int]] = []
        completed: list[CompletedTxn] = []
        duplicates: list[BatchMetadata] = []
        fresh = 0
        for batch in batches:
            if batch.producer_id == NO_PRODUCER_ID:
                fresh += 1
                continue
            current = self._producers.get(batch.producer_id)
            if batch.control_type is None and current is not None and batch.producer_id not in updated:
                duplicate = current.find_duplicate_batch(batch)
                if duplicate is not None:
                    duplicates.append(duplicate)
                    continue
            fresh += 1
            entry = updated.get(batch.producer_id)
            if entry is None:
                entry = (current.copy() if current is not None
                         else ProducerStateEntry(batch.producer_id))
                updated[batch.producer_id] = entry
            if batch.control_type is not None:
                done = self._append_marker(entry, batch)
                if done is not None:
                    completed.append(done)
            else:
                first_txn = entry.current_txn_first_offset
                self._append_data(entry, batch)
                if first_txn == NO_TXN and entry.current_txn_first_offset != NO_TXN:
                    started.append((batch.producer_id, entry.current_txn_first_offset))
        if duplicates:
            if fresh:
                raise OutOfOrderSequenceError(
                    f"an append mixes {len(duplicates)} batches already appended with {fresh} "
                    "new ones: resend the new batches on their own",
                    producer_id=next(iter(updated), NO_PRODUCER_ID),
                )
            return DuplicateAppend(
                duplicates[0].first_offset, duplicates[-1].last_offset, duplicates[-1].timestamp
            )
        return ProducerAppend(updated, tuple(started), tuple(completed), end_offset)

    def _append_data(self, entry: ProducerStateEntry, batch: ProducerBatch) -> None:
        """Kafka's ``ProducerAppendInfo.appendDataBatch``: epoch, sequence, transaction."""
        producer_id, epoch = batch.producer_id, batch.producer_epoch
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {producer_id} at offset {batch.first_offset} is "
                f"older than its current epoch {entry.producer_epoch}: the producer is fenced",
                producer_id=producer_id,
            )
        sequence = batch.base_sequence
        if entry.producer_epoch == NO_PRODUCER_EPOCH:
            if sequence != 0:
                raise UnknownProducerIdError(
                    f"producer {producer_id} (epoch {epoch}) is unknown to this partition (never "
                    f"seen, or its state expired) and sent sequence {sequence}, not 0",
                    producer_id=producer_id,
                )
        elif epoch != entry.producer_epoch:
            if sequence != 0:
                raise OutOfOrderSequenceError(
                    f"invalid sequence {sequence} for the new epoch {epoch} of producer "
                    f"{producer_id} (was {entry.producer_epoch}): a new epoch starts at 0",
                    producer_id=producer_id,
                )
        else:
            # A producer whose entry holds no batch of this epoch (a marker bumped or closed it,
            # or a snapshot kept only its marker) starts at 0: NO_SEQUENCE + 1, as in Kafka.
            last_seq = entry.last_seq
            if not _in_sequence(last_seq, sequence):
                raise OutOfOrderSequenceError(
                    f"out of order sequence {sequence} from producer {producer_id} (epoch {epoch}) "
                    f"at offset {batch.first_offset}: expected {increment_sequence(last_seq, 1)}",
                    producer_id=producer_id,
                )
        if batch.is_transactional:
            if entry.current_txn_first_offset == NO_TXN:
                entry.current_txn_first_offset = batch.first_offset
        elif entry.current_txn_first_offset != NO_TXN:
            raise InvalidTxnStateError(
                f"non-transactional batch from producer {producer_id} at offset "
                f"{batch.first_offset} while its transaction from offset "
                f"{entry.current_txn_first_offset} is open",
                producer_id=producer_id,
            )
        entry.add_batch(epoch, batch.last_sequence, batch.last_offset,
                        batch.last_offset - batch.first_offset, batch.max_timestamp)

    def _append_marker(self, entry: ProducerStateEntry, batch: ProducerBatch) -> CompletedTxn | None:
        """Kafka's ``appendEndTxnMarker``: epoch and coordinator epoch checked, txn closed."""
        producer_id, epoch = batch.producer_id, batch.producer_epoch
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"{batch.control_type!r} marker with epoch {epoch} for producer {producer_id} is "
                f"older than its current epoch {entry.producer_epoch}",
                producer_id=producer_id,
            )
        if entry.coordinator_epoch > batch.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{batch.control_type!r} marker for producer {producer_id} comes from coordinator "
                f"epoch {batch.coordinator_epoch}, older than {entry.coordinator_epoch}",
                producer_id=producer_id,
            )
        done = None
        if entry.current_txn_first_offset != NO_TXN:
            done = CompletedTxn(producer_id, entry.current_txn_first_offset, batch.first_offset,
                                batch.control_type is ControlRecordType.ABORT)
        if epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = epoch
        entry.coordinator_epoch = batch.coordinator_epoch
        entry.current_txn_first_offset = NO_TXN
        entry.last_timestamp = batch.max_timestamp
        return done

    def apply(self, append: ProducerAppend) -> None:
        """Record an accepted append (after its bytes were written)."""
        self._producers.update(append.entries)
        txns = self._txns
        for producer_id, first_offset in append.started_txns:
            txns.begin(producer_id, first_offset)
        for txn in append.completed_txns:
            txns.end(txn.producer_id, txn.last_offset, txn.is_aborted)
        if append.started_txns or append.completed_txns:
            self._first_unstable = txns.first_unstable_offset()
        self.map_end_offset = max(self.map_end_offset, append.end_offset)

    def load_batches(
        self, batches: Iterable[ProducerBatch], end_offset: int
    ) -> list[tuple[CompletedTxn, int]]:
        """Replay batches read from the log (recovery), without the client-side checks.

        As Kafka's replication origin: sequences are not checked, duplicates are not dropped.
        Returns the transactions the markers completed, each with the LSO of the moment its
        marker was replayed (:meth:`last_stable_offset_for`; the caller indexes the aborted
        ones). One call may replay a whole segment: the first unstable offset is computed once,
        at the end (per batch it cost as much as the rest of the replay).
        """
        done: list[tuple[CompletedTxn, int]] = []
        txns = self._txns
        for batch in batches:
            entry = self._producers.get(batch.producer_id)
            if entry is None:
                entry = self._producers[batch.producer_id] = ProducerStateEntry(batch.producer_id)
            if batch.control_type is not None:
                # A marker closes the producer's open transaction (the records package's
                # replay, which Spark's file mode runs too).
                txn = txns.end(batch.producer_id, batch.first_offset,
                               batch.control_type is ControlRecordType.ABORT)
                if txn is not None:
                    done.append((txn, txns.last_stable_offset_for(txn)))
                if batch.producer_epoch != entry.producer_epoch:
                    entry.batches.clear()
                    entry.producer_epoch = batch.producer_epoch
                # The latest marker's, even if lower (KAFKA-9144: the live log took it because
                # the producer had expired in between), as Kafka's replay does.
                entry.coordinator_epoch = batch.coordinator_epoch
                entry.current_txn_first_offset = NO_TXN
                entry.last_timestamp = batch.max_timestamp
                continue
            if batch.is_transactional and txns.begin(batch.producer_id, batch.first_offset):
                entry.current_txn_first_offset = batch.first_offset
            entry.add_batch(batch.producer_epoch, batch.last_sequence, batch.last_offset,
                            batch.last_offset - batch.first_offset, batch.max_timestamp)
        self._first_unstable = txns.first_unstable_offset()
        self.map_end_offset = max(self.map_end_offset, end_offset)
        return done

    def restore_batch_history(self, scanned: ProducerStateManager) -> int:
        """Give back each producer the batches before its last one that ``scanned`` (a state
        replayed from the log's tail by :meth:`load_batches`, starting empty) saw; returns how
        many producers got some back.

        A snapshot keeps a producer's last batch only, so a state loaded from one recognises a
        resend of that batch and of no earlier one of the last 5 (Kafka's too). A producer
        whose session broke with several batches in flight resends them oldest first: answered
        OUT_OF_ORDER_SEQUENCE, it restarts its sequences under a new id and stores them again.
        A scanned entry is taken only if it holds the same epoch and ends with the same batch
        (sequence, offset, offset delta): then its batches are the producer's last ones, in
        order, with no other batch of that epoch between them. The entry's own last batch is
        kept (its timestamp may be a later marker's, as the snapshot's).
        """
        restored = 0
        for producer_id, entry in self._producers.items():
            seen = scanned._producers.get(producer_id)
            if (seen is None or seen.producer_epoch != entry.producer_epoch
                    or not entry.batches or len(seen.batches) <= len(entry.batches)):
                continue
            last, candidate = entry.batches[-1], seen.batches[-1]
            if (candidate.last_seq, candidate.last_offset, candidate.offset_delta) != (
                    last.last_seq, last.last_offset, last.offset_delta):
                continue
            history = list(seen.batches)[:-1]
            history.append(last)
            entry.batches = deque(history, maxlen=NUM_BATCHES_TO_RETAIN)
            restored += 1
        return restored

    # ------------------------------------------------------------------- expiry and truncation

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` without an open transaction
        (Kafka's ``removeExpiredProducers``); returns their ids."""
        expired = [
            producer_id for producer_id, entry in self._producers.items()
            if entry.current_txn_first_offset == NO_TXN
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        ]
        for producer_id in expired:
            del self._producers[producer_id]
        return expired

    def reset(self, map_end_offset: int) -> None:
        """Forget every producer; the (empty) state reflects offsets below ``map_end_offset``."""
        self._producers = {}
        self._txns = TransactionReplay()
        self._first_unstable = None
        self.map_end_offset = map_end_offset

    # ------------------------------------------------------------------- snapshots

    def snapshot_bytes(self) -> bytes:
        """The ``.snapshot`` bytes of the current state (producers by id)."""
        return pack_producer_snapshot(
            self._producers[pid].to_snapshot_entry() for pid in sorted(self._producers)
        )

    def take_snapshot(self, *, fsync: bool = True) -> Path:
        """Write the state as ``<map_end_offset>.snapshot`` (replacing one of that name).

        Raises:
            StorageIOError: the file cannot be written.
        """
        path = producer_snapshot_file(self._directory, self.map_end_offset)
        atomic_write(path, self.snapshot_bytes(), fsync=fsync)
        self.snapshots_seen = True
        return path

    def flush_snapshot(self, offset: int) -> bool:
        """fsync the snapshot file at ``offset`` if it still exists (Kafka's
        ``flushProducerStateSnapshot``, ``Utils.flushFileIfExists``); False if it does not.

        For a snapshot written with ``fsync=False``; its name is made durable by the caller's
        fsync of the directory. Touches no state: safe off the log's lock, concurrently with
        the writer (a snapshot deleted meanwhile is simply not there).

        Raises:
            StorageIOError: the file exists but cannot be opened or fsynced.
        """
        path = producer_snapshot_file(self._directory, offset)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False  # deleted since (retention, truncation): nothing to make durable
        except OSError as exc:
            raise StorageIOError(f"cannot open producer snapshot {path} to fsync it: {exc}") from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise StorageIOError(f"fsync of producer snapshot {path} failed: {exc}") from exc
        finally:
            os.close(fd)
        return True

    def load_latest_snapshot(
        self,
        at_or_below: int,
        log_start_offset: int,
        now_ms: int,
        offsets: list[int] | None = None,
    ) -> bool:
        """Load the latest readable snapshot with offset in ``[log_start_offset, at_or_below]``.

        Corrupt or truncated snapshots on the way are logged (file and why) and deleted; the
        state of producers expired by ``now_ms`` is not loaded (Kafka's ``loadFromSnapshot``).
        Returns False (state reset to ``log_start_offset``) when no snapshot could be used.
        ``offsets`` are the snapshot offsets present, when the caller listed the directory.
        """
        if offsets is None:
            offsets = list_snapshot_offsets(self._directory)
        self.snapshots_seen = self.snapshots_seen or bool(offsets)
        found = self._read_latest_snapshot(offsets, log_start_offset, at_or_below)
        if found is None:
            self.reset(log_start_offset)
            return False
        offset, entries = found
        self.reset(offset)
        for entry in entries:
            self._load_entry(entry, now_ms)
        self._first_unstable = self._txns.first_unstable_offset()
        return True

    def load_unknown_producers(
        self, offsets: list[int], scanned_from: int, at_or_below: int, now_ms: int
    ) -> int:
        """Add the producers this state does not know from the latest readable snapshot with
        offset in ``[scanned_from, at_or_below]``; returns how many were added.

        For a state rebuilt by a scan of the log from ``scanned_from`` on with nothing known
        before it (no usable snapshot there, so the scan began at the log start): a producer
        the scan did not meet has no batch in the log from there on, so a later snapshot's
        entry for it is its state still. Kafka keeps such producers because it loads its latest snapshot;
        without this, a producer whose batches all lie below the log start (DeleteRecords) is
        forgotten by an unclean restart.
        """
        found = self._read_latest_snapshot(offsets, scanned_from, at_or_below)
        if found is None:
            return 0
        added = 0
        for entry in found[1]:
            if entry.producer_id not in self._producers and self._load_entry(entry, now_ms):
                added += 1
        self._first_unstable = self._txns.first_unstable_offset()
        return added

    def _load_entry(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        """Take one snapshot entry unless it expired by ``now_ms``; True if taken."""
        if (entry.current_txn_first_offset == NO_TXN
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms):
            return False
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset != NO_TXN:
            self._txns.begin(entry.producer_id, entry.current_txn_first_offset)
        return True

    def _read_latest_snapshot(
        self, offsets: list[int], low: int, high: int
    ) -> tuple[int, list[ProducerStateEntry]] | None:
        """(offset, entries) of the latest readable snapshot with offset in ``[low, high]``.

        A corrupt one on the way is deleted, as Kafka does: kept, it would be read (and
        skipped) at every open, and make every open without a newer snapshot scan the whole
        log. One that cannot be read now (an I/O error) is left in place.
        """
        for offset in reversed(offsets):
            if offset > high or offset < low:
                continue
            path = producer_snapshot_file(self._directory, offset)
            try:
                snapshot = unpack_producer_snapshot(path.read_bytes(), verify_crc=True)
            except CorruptSnapshotError as exc:
                log.warning("deleting corrupt producer snapshot %s: %s", path, exc)
                self._delete_snapshot_file(path)
                continue
            except FileNotFoundError:
                continue  # deleted since the directory was listed
            except OSError as exc:
                log.warning("ignoring unreadable producer snapshot %s: %s", path, exc)
                continue
            return offset, [ProducerStateEntry.from_snapshot_entry(raw) for raw in snapshot.entries]
        return None

    def delete_snapshots(
        self,
        *,
        below: int | None = None,
        above: int | None = None,
        offsets: list[int] | None = None,
    ) -> int:
        """Delete snapshot files with offset ``< below`` or ``> above``; returns how many.
        ``offsets`` are the snapshot offsets present, when the caller listed the directory."""
        deleted = 0
        for offset in list_snapshot_offsets(self._directory) if offsets is None else offsets:
            if (below is not None and offset < below) or (above is not None and offset > above):
                path = producer_snapshot_file(self._directory, offset)
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    raise StorageIOError(f"cannot delete producer snapshot {path}: {exc}") from exc
                deleted += 1
        return deleted

    @staticmethod
    def _delete_snapshot_file(path: Path) -> None:
        """Unlink a snapshot that cannot be used; a failure is logged, not raised (the file is
        skipped again at the next open)."""
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot delete corrupt producer snapshot %s: %s", path, exc)

    def __repr__(self) -> str:
        return (f"ProducerStateManager(directory={str(self._directory)!r}, "
                f"producers={len(self._producers)}, map_end_offset={self.map_end_offset})")


def list_snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the ``.snapshot`` files in ``directory``, ascending."""
    return sorted(_iter_snapshot_offsets(directory))


def _iter_snapshot_offsets(directory: Path) -> Iterator[int]:
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise StorageIOError(f"cannot list log directory {directory}: {exc}") from exc
    for name in names:
        if name.endswith(SNAPSHOT_FILE_SUFFIX):
            try:
                yield offset_from_file_name(name)
            except ValueError:
                continue
