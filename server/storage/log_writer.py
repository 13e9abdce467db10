"""The append path of a partition log: validate, judge producers, stamp epochs, roll, write, publish.

Every way records enter a :class:`~stratalog.server.storage.partition_log.PartitionLog` goes
through its one :class:`LogWriter`: a client's batches (:meth:`LogWriter.append`, and its
event-loop form :meth:`LogWriter.try_append_without_blocking` /
:meth:`LogWriter.append_deferred`), a transaction coordinator's COMMIT or ABORT marker
(:meth:`LogWriter.write_txn_marker`) and a follower's copy of its leader's batches
(:meth:`LogWriter.append_as_follower`). One append, in order::

    validate (validation.py: CRCs, sizes, timestamps; offsets assigned from the log end)
      -> judge the producers (idempotence, transactions; the coordinator's verifier)
      -> roll if the active segment cannot take it (LocalLog.roll, then the producer snapshot)
      -> assign the leader epoch's start if new (leader-epoch-checkpoint, before the bytes)
      -> write (.txnindex entries of aborted transactions first, then the batches)
      -> fsync when flush.messages or the producer asks (durable before visible)
      -> publish the new end (log end offset, active segment, size, first unstable offset)

An append touches the file system only to write, and to roll when one is due (deletions
are background work); :meth:`LogWriter.try_append_without_blocking` says when an append would
do more than write (roll, fsync, wait for the lock), so that an event loop can hand those to a
thread.

This is Kafka's ``UnifiedLog.append`` and ``appendAsFollower`` with its ``roll``
(``storage/src/main/java/org/apache/kafka/storage/internals/log/UnifiedLog.java``); the
contract of each call is on the :class:`PartitionLog` method of the same name, which delegates
here (``append`` and ``try_append_without_blocking`` are this writer's methods themselves on
each partition log, bound in its constructor: every produce saves the forwarding call). The
results (:class:`AppendInfo`, :class:`DeferredAppend`) are defined here and re-exported by
``partition_log.py``.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from stratalog.records.batch import NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP
from stratalog.records.builder import BatchBuilder
from stratalog.records.control import ControlRecordType, EndTransactionMarker

from .config import LogConfig
from .descriptor_budget import ran_out_of_descriptors
from .errors import LogClosedError, StorageIOError
from .follower_append import FollowerRun, validate_follower_batches
from .leader_epoch_cache import LeaderEpochCache
from .local_log import LocalLog, LogEnd
from .producer_state import (
    DuplicateAppend,
    ProducerAppend,
    ProducerBatch,
    ProducerStateManager,
)
from .segment import Segment
from .txn_index import AbortedTxn
from .validation import ValidatedAppend, validate_and_assign_offsets

__all__ = [
    "LEADER_EPOCH",
    "AppendInfo",
    "DeferredAppend",
    "FlushScheduler",
    "LogWriter",
    "TransactionVerifier",
    "WouldBlock",
]

log = logging.getLogger(__name__)

# A single server is the one leader of its partitions for the life of the log: every batch is
# stamped with epoch 0, as a Kafka partition whose first leader never changed. (Clients send
# -1.) A replicated partition's leader passes its own epoch to the append path.
LEADER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append did (Kafka's ``LogAppendInfo``, the part a producer sees).

    ``first_offset``/``last_offset`` are -1 for an empty append. ``max_timestamp`` and
    ``offset_of_max_timestamp`` are what was indexed: the largest record timestamp and the last
    offset of the earliest batch holding it (CreateTime), or the append time and the last offset
    (LogAppendTime). ``log_append_time`` is -1 unless the topic uses LogAppendTime.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    size_bytes: int
    log_start_offset: int
    # True when every batch repeated one of its producer's last 5: nothing was written and the
    # offsets are those of the original append (Kafka answers a duplicate so).
    duplicate: bool = False


class WouldBlock(enum.Enum):
    """Why :meth:`PartitionLog.try_append_without_blocking` left an append undone."""

    LOCK_HELD = "the log's lock is held by another thread (maintenance, a flush, close)"
    OPEN_INDEXES = "the active segment's index files are not open yet: opening creates them"
    ROLL = "the append must roll a new segment: files created, the old segment trimmed"
    FLUSH = "flush.messages: the append would fsync"


@dataclass(frozen=True, slots=True)
class DeferredAppend:
    """An append :meth:`PartitionLog.try_append_without_blocking` did not do, and why.

    ``record_batches`` are the caller's batches, ``reason`` what the append would have waited
    for. ``validated`` is set when the batches passed validation before the reason was found
    (a roll or a flush), with the log end offset (``first_offset``), the config and the clock
    reading it was made against: :meth:`PartitionLog.append_deferred` reuses it while those
    still hold. ``verify_transaction`` is the caller's verifier, run again when the append is
    carried out (the coordinator's state may have moved meanwhile), and
    ``decompressed_bytes_max`` the caller's bound, applied again if the batches are. Immutable; holds views of
    the caller's batches, which must not change.
    """

    record_batches: bytes | bytearray | memoryview = field(repr=False)
    reason: WouldBlock
    validated: ValidatedAppend | None = field(default=None, repr=False)
    first_offset: int = -1
    config: LogConfig | None = field(default=None, repr=False)
    now_ms: int = -1
    verify_transaction: TransactionVerifier | None = field(default=None, repr=False)
    decompressed_bytes_max: int | None = None
    leader_epoch: int = LEADER_EPOCH


#: Checks a client's transactional batch against the transaction coordinator before it is
#: appended: called as ``verify(producer_id, producer_epoch)`` under the log's lock, once per
#: transactional batch, it raises to refuse the append (nothing is written). It must not block:
#: an event loop's append runs it. The server binds one per partition; the log never imports
#: the coordinator. (Kafka's ReplicaManager verifies a transactional produce with the
#: coordinator before the append, KIP-890.)
TransactionVerifier = Callable[[int, int], None]


# Runs a job later, off the caller's thread (``concurrent.futures.Executor.submit`` fits).
FlushScheduler = Callable[[Callable[[], None]], object]


class LogWriter:
    """The one writer of a partition log: every append, marker, follower append and roll.

    Holds nothing of its own but the collaborators it is given: the :class:`LocalLog` it
    writes to, the lock shared with the :class:`PartitionLog` above and the local log below,
    the log's :class:`ProducerStateManager` and :class:`LeaderEpochCache`, the clock, the
    flush scheduler, and a way to read the log start offset (the partition log's, reported in
    every :class:`AppendInfo`).

    Invariants: an append is validated against the end it will be written at (offsets
    assigned from it, under the lock); a leader epoch's start is in the cache before any
    batch of that epoch is written; the ``.txnindex`` entries of an ABORT are written before
    the marker; the new end is published last, with the producer state's first unstable
    offset after the append, so that a lock-free reader computes the LSO from one moment;
    with a flush, records are published only once fsynced.

    Crash behaviour: what :class:`LocalLog` says: bytes reach the page cache, a torn tail is
    cut by recovery, an I/O error on a write path takes the log offline before anything is
    published. A producer snapshot taken at a roll is not fsynced until the flush that moves
    the recovery point to it (:meth:`roll`).

    Concurrency: the public methods take the shared lock (``try_append_without_blocking``
    only if it is free); the private ones and :meth:`roll` expect it held. Not used from
    anywhere but its :class:`PartitionLog`.
    """

    def __init__(
        self,
        local: LocalLog,
        lock: threading.RLock,
        producer_state: ProducerStateManager,
        epoch_cache: LeaderEpochCache,
        time_ms: Callable[[], int],
        log_start_offset: Callable[[], int],
        flush_scheduler: FlushScheduler | None = None,
    ) -> None:
        self._local = local
        self._lock = lock
        self._producer_state = producer_state
        self._epoch_cache = epoch_cache
        self._time_ms = time_ms
        self._log_start_offset = log_start_offset
        self._flush_scheduler = flush_scheduler

    def append(
        self,
        record_batches: bytes | bytearray | memoryview,
        *,
        verify_transaction: TransactionVerifier | None = None,
        flush: bool = False,
        decompressed_bytes_max: int | None = None,
        leader_epoch: int = LEADER_EPOCH,
    ) -> AppendInfo:
        """Validate client batches, assign offsets from the log end, and append them.

        ``record_batches`` is one or more whole RecordBatch v2 batches with base offset 0 (see
        :mod:`~stratalog.server.storage.validation` for every check). The log rolls first if
        the active segment cannot take the append (Kafka UnifiedLog.maybeRoll and
        LogSegment.shouldRoll; docs/kafka-behaviours.md#roll); the bytes are written with one
        positioned write: all the batches or none. An empty input does nothing. When the topic sets
        ``flush.messages`` and enough messages are unflushed, the log is flushed before this
        returns, and so with ``flush`` (a Produce with ``flush=true``): then the records are
        published (readers see them, the log end moves) only once fsynced, so a failed fsync never
        lets them be read. Segments waiting for deletion are left to
        :meth:`PartitionLog.maybe_delete_pending`: an append deletes no file.

        An I/O error (the write, the fsync, the roll) takes the log offline: the records are
        not published, the call raises it, and every later call raises LogDirOfflineError;
        the next start recovers the directory (or not) as after a crash.

        ``verify_transaction`` (see :data:`TransactionVerifier`) is called for every
        transactional batch after validation and before the producer state judges it, under the
        lock that transaction markers also take: a batch it accepted is written before any
        marker that ends its transaction. Batches without the transactional flag never call it.
        ``decompressed_bytes_max`` bounds the bytes the batches' records decompress to, all
        together (validation's ``decompressed_bytes_max``; None: each batch by the default).

        ``leader_epoch`` is stamped on every batch (a single server's is 0; a replicated
        partition's leader passes its own, having checked it is still the leader). The first
        append of an epoch records its start offset in the leader epoch cache, whose
        checkpoint is rewritten (fsynced) before the records are written.

        Blocking: waits for the log's lock (held by maintenance while it renames or deletes
        segments) and may roll (create files, trim the old segment) or fsync. An event loop
        calls :meth:`try_append_without_blocking` instead.

        Raises:
            CorruptRecordError, InvalidRecordError, RecordTooLargeError: bad batches.
            InvalidTimestampError: a timestamp outside the accepted window.
            RecordBatchTooLargeError: the append is larger than ``segment.bytes`` or
                decompresses to more than ``decompressed_bytes_max``.
            StorageIOError: the write, fsync or roll failed; nothing was published and the log
                is offline.
            LogClosedError: the log is closed. LogDirOfflineError: the log is offline.
            what ``verify_transaction`` raises; nothing was appended.
        """
        with self._lock:
            self._local.ensure_open()
            if len(record_batches) == 0:
                return self._empty_append_info()
            now_ms = self._time_ms()
            validated = self._validate(
                record_batches, now_ms, decompressed_bytes_max, leader_epoch
            )
            return self._write(validated, now_ms, verify=verify_transaction, flush=flush)

    def write_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        *,
        leader_epoch: int = LEADER_EPOCH,
    ) -> AppendInfo:
        """Append a COMMIT (``commit``) or ABORT control batch ending ``producer_id``'s
        transaction, as a transaction coordinator does (Kafka's ``appendAsLeader`` with the
        COORDINATOR origin).

        The batch is a one-record control batch (attributes: control and transactional) with
        the producer's id and epoch, no sequence, and the marker of :mod:`records.control`
        holding ``coordinator_epoch``, stamped with the log's clock. It completes the producer's
        open transaction: an ABORT appends ``AbortedTxn(producer id, first offset, marker
        offset, LSO)`` to the active segment's ``.txnindex`` before the marker becomes visible,
        and the last stable offset moves past the transaction. A marker for a producer with no
        open transaction is written and completes nothing (as in Kafka). ``leader_epoch`` as
        in :meth:`append`.

        Raises:
            InvalidProducerEpochError: ``producer_epoch`` is older than the producer's.
            TransactionCoordinatorFencedError: ``coordinator_epoch`` is older than the last one
                that wrote a marker for the producer.
            ValueError: ``producer_id`` is negative.
            StorageIOError, LogClosedError: as :meth:`append`.
        """
        if producer_id < 0:
            raise ValueError(f"a transaction marker needs a producer id, got {producer_id}")
        marker = EndTransactionMarker(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, coordinator_epoch
        )
        with self._lock:
            self._local.ensure_open()
            now_ms = self._time_ms()
            builder = BatchBuilder(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=NO_SEQUENCE,
                is_transactional=True,
                is_control=True,
            )
            builder.append(now_ms, marker.encode_key(), marker.encode_value(), ())
            validated = validate_and_assign_offsets(
                builder.build(),
                self._local.config,
                first_offset=self._local.end.offset,
                now_ms=now_ms,
                partition_leader_epoch=leader_epoch,
                allow_control=True,
            )
            offset = validated.first_offset
            control = ProducerBatch(
                producer_id, producer_epoch, NO_SEQUENCE, offset, offset,
                validated.max_timestamp, True, marker.type, coordinator_epoch,
            )
            return self._write(validated, now_ms, (control,))

    def try_append_without_blocking(
        self,
        record_batches: bytes | bytearray | memoryview,
        *,
        verify_transaction: TransactionVerifier | None = None,
        decompressed_bytes_max: int | None = None,
        leader_epoch: int = LEADER_EPOCH,
    ) -> AppendInfo | DeferredAppend:
        """:meth:`append`, unless it would wait for the lock or touch the file system beyond
        the write; then nothing changes and a :class:`DeferredAppend` says why.

        The append is left undone (:class:`WouldBlock`) when the log's lock is held by another
        thread (maintenance renaming or deleting segments, a flush's bookkeeping, close), when
        the active segment's index files are not open yet (in a log just opened; a roll opens
        the new segment's itself), when the append would roll, and when it would fsync
        (``flush.messages``). Otherwise it validates, writes and indexes exactly as
        :meth:`append` does: a page-cache write and index entries in mapped memory, with the
        blocks of a large append allocated first. Batches that fail validation raise as in
        :meth:`append`; the batches of a deferred append were validated already when the
        reason is a roll or a flush, and :meth:`append_deferred` reuses that work.

        One exception to "nothing but the write": the first append of a leader epoch rewrites
        (and fsyncs) the small ``leader-epoch-checkpoint`` inline, as Kafka's request
        threads do; a single server's partition does so once in its life, and a leader that
        assigns its epoch when it takes over (:meth:`PartitionLog.maybe_assign_epoch_start_offset`) never.

        Never waits: the lock is taken only if it is free. For an event loop, which hands a
        :class:`DeferredAppend` to a thread that may block (:meth:`append_deferred`), still
        serialising its appends to this log.

        Raises:
            the errors of :meth:`append` (and its validation), never from waiting.
        """
        if not self._lock.acquire(blocking=False):
            return DeferredAppend(
                record_batches, WouldBlock.LOCK_HELD, verify_transaction=verify_transaction,
                decompressed_bytes_max=decompressed_bytes_max, leader_epoch=leader_epoch,
            )
        try:
            self._local.ensure_open()
            if len(record_batches) == 0:
                return self._empty_append_info()
            segment = self._local.active_segment
            if segment.indexes_loaded != (True, True):
                return DeferredAppend(
                    record_batches, WouldBlock.OPEN_INDEXES, verify_transaction=verify_transaction,
                    decompressed_bytes_max=decompressed_bytes_max, leader_epoch=leader_epoch,
                )
            now_ms = self._time_ms()
            validated = self._validate(
                record_batches, now_ms, decompressed_bytes_max, leader_epoch
            )
            judged = self._judge_producers(validated, None, verify_transaction)
            if isinstance(judged, DuplicateAppend):
                return self._duplicate_append_info(judged)
            if self._roll_due(segment, validated, now_ms):
                reason = WouldBlock.ROLL
            elif self._flush_due(validated.last_offset + 1):
                reason = WouldBlock.FLUSH
            else:
                return self._write_to(segment, validated, judged)
            return DeferredAppend(
                record_batches, reason, validated, self._local.end.offset, self._local.config, now_ms,
                verify_transaction, decompressed_bytes_max, leader_epoch,
            )
        finally:
            self._lock.release()

    def append_deferred(self, deferred: DeferredAppend) -> AppendInfo:
        """Carry out an append :meth:`try_append_without_blocking` deferred; blocking, as
        :meth:`append`.

        The validation it did is reused when nothing moved the log end or replaced the config
        since (the offsets and the stamped headers depend on both); otherwise the batches are
        validated again. Raises what :meth:`append` raises.
        """
        with self._lock:
            self._local.ensure_open()
            validated = deferred.validated
            if (
                validated is None
                or deferred.first_offset != self._local.end.offset
                or deferred.config is not self._local.config
            ):
                return self.append(
                    deferred.record_batches,
                    verify_transaction=deferred.verify_transaction,
                    decompressed_bytes_max=deferred.decompressed_bytes_max,
                    leader_epoch=deferred.leader_epoch,
                )
            return self._write(validated, deferred.now_ms, verify=deferred.verify_transaction)

    def append_as_follower(
        self, record_batches: bytes | bytearray | memoryview
    ) -> AppendInfo:
        """Append the leader's batches as they are: their offsets, epochs and headers kept
        (Kafka's ``UnifiedLog.appendAsFollower``). A replica fetching from its leader calls
        this with the fetched bytes.

        Checks (``follower_append.py``): whole batches with valid CRCs, offsets increasing
        from at or above the log end offset (a gap a compacted leader left is kept), every batch
        stamped with a leader epoch. Nothing is re-stamped and no offset assigned; no
        timestamp or sequence is checked (the leader did). The producer state replays the
        batches as recovery does (Kafka's replication origin: no duplicate or sequence check
        refuses them; transaction markers open and close transactions, ABORT markers get
        their ``.txnindex`` entries before they are visible). Each batch whose epoch differs
        from the one before it assigns its epoch in the leader epoch cache, before the write.

        The log rolls, as for a leader's append, when the active segment cannot take the
        batches: too many bytes, too old, or an offset that does not fit the segment's 32-bit
        relative offsets; the new segment starts at the first batch's base offset (which may
        lie past the log end). An append spanning more than 2^31 - 1 offsets goes to several
        segments, one roll each. Whole append or nothing for validation errors; an I/O error
        takes the log offline as :meth:`append` says. The high watermark does not move: the
        replication layer sets it (:meth:`PartitionLog.update_high_watermark`) from the leader's.

        Returns the :class:`AppendInfo` of the whole append (its first and last offsets are
        the leader's).

        Raises:
            UnexpectedAppendOffsetError: the first batch starts below the log end offset.
            CorruptRecordError, InvalidRecordError, RecordTooLargeError: a bad batch.
            RecordBatchTooLargeError: the append is larger than ``segment.bytes``.
            StorageIOError, LogClosedError, LogDirOfflineError: as :meth:`append`.
        """
        with self._lock:
            self._local.ensure_open()
            runs = validate_follower_batches(
                record_batches, self._local.config, log_end_offset=self._local.end.offset,
                log_name=str(self._local.directory),
            )
            if not runs:
                return self._empty_append_info()
            now_ms = self._time_ms()
            for run in runs:
                self._write_follower_run(run, now_ms)
            return self._follower_append_info(runs)

    def try_append_as_follower_without_blocking(
        self, record_batches: bytes | bytearray | memoryview
    ) -> AppendInfo | None:
        """:meth:`append_as_follower`, unless it would wait for the lock or touch the file
        system beyond the write: then nothing changes and None (the caller appends in a thread
        that may block, validating again).

        Left undone (None) when the log's lock is held by another thread, when the active
        segment's index files are not open yet, when the batches need a roll (or several
        segments), when their leader epoch is not the cache's latest (assigning it rewrites
        and fsyncs ``leader-epoch-checkpoint``), when a batch is a transaction marker (an
        ABORT writes the ``.txnindex``, which may be opened first), and when the append would
        fsync (``flush.messages``). Otherwise it does exactly what :meth:`append_as_follower`
        does: a page-cache write and index entries in mapped memory. Batches that fail
        validation raise as there, with nothing written.

        Never waits: the lock is taken only if it is free. For an event loop applying a
        follower's small fetch answers, which the replication of each acks=all produce waits
        for (docs/cluster.md, "Replication").
        """
        if not self._lock.acquire(blocking=False):
            return None
        try:
            self._local.ensure_open()
            segment = self._local.active_segment
            if segment.indexes_loaded != (True, True):
                return None
            runs = validate_follower_batches(
                record_batches, self._local.config, log_end_offset=self._local.end.offset,
                log_name=str(self._local.directory),
            )
            if not runs:
                return self._empty_append_info()
            if len(runs) > 1:
                return None  # a roll between them
            run = runs[0]
            validated = run.validated
            now_ms = self._time_ms()
            epoch_cache = self._epoch_cache
            if (
                any(epoch_cache.needs_assign(epoch, start) for epoch, start in run.epoch_starts)
                or any(batch.control_type is not None for batch in run.producer_batches)
                or self._roll_due(segment, validated, now_ms)
                or self._flush_due(validated.last_offset + 1)
            ):
                return None
            self._write_follower_run(run, now_ms)
            return self._follower_append_info(runs)
        finally:
            self._lock.release()

    def _write_follower_run(self, run: FollowerRun, now_ms: int) -> None:
        """Roll if due, assign the run's epochs, replay its producers, write it, then flush
        when ``flush.messages`` says so, and publish the new end. Under the lock.

        The producer state is replayed before the write (the ABORT markers' ``.txnindex``
        entries need the LSO of their moment and must precede the marker's bytes); a failed
        write then leaves it ahead of the log, which is harmless because the failure takes
        the log offline and the next open rebuilds the state from the log."""
        validated = run.validated
        segment = self._local.active_segment
        if self._roll_due(segment, validated, now_ms):
            log.debug(
                "rolling log %s for a follower append at offsets [%d, %d]", self._local.directory,
                validated.first_offset, validated.last_offset,
            )
            segment = self.roll(validated.first_offset)
        try:
            self._epoch_cache.assign_all(run.epoch_starts)
        except StorageIOError as exc:
            self._local.io_failed(exc, "leader epoch checkpoint write")
            raise
        end_offset = validated.last_offset + 1
        state = self._producer_state
        try:
            if run.producer_batches:
                for txn, last_stable_offset in state.load_batches(run.producer_batches, end_offset):
                    if txn.is_aborted:
                        segment.txn_index.append(AbortedTxn(
                            txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset
                        ))
            else:
                state.map_end_offset = end_offset
            segment.append(
                validated.last_offset,
                validated.max_timestamp,
                validated.shallow_offset_of_max_timestamp,
                validated.pieces,
            )
        except BaseException as exc:
            self._local.io_failed(exc, "follower write")
            raise
        new_end = LogEnd(
            end_offset, segment.base_offset, segment.size_bytes, state.first_unstable_offset
        )
        if self._flush_due(end_offset):
            # Durable before visible, as a leader's flushed append.
            self._local.flush(None, end_offset)
        self._local.publish_end(new_end)

    def _validate(
        self,
        record_batches: bytes | bytearray | memoryview,
        now_ms: int,
        decompressed_bytes_max: int | None,
        leader_epoch: int = LEADER_EPOCH,
    ) -> ValidatedAppend:
        return validate_and_assign_offsets(
            record_batches,
            self._local.config,
            first_offset=self._local.end.offset,
            now_ms=now_ms,
            partition_leader_epoch=leader_epoch,
            decompressed_bytes_max=decompressed_bytes_max,
        )

    def _follower_append_info(self, runs: list[FollowerRun]) -> AppendInfo:
        """The :class:`AppendInfo` of a follower append of ``runs`` (the leader's offsets; the
        first run's largest timestamp among equals)."""
        max_timestamp, offset_of_max = NO_TIMESTAMP, -1
        for run in runs:
            if run.validated.max_timestamp > max_timestamp or offset_of_max < 0:
                max_timestamp = run.validated.max_timestamp
                offset_of_max = run.validated.shallow_offset_of_max_timestamp
        return AppendInfo(
            first_offset=runs[0].validated.first_offset,
            last_offset=runs[-1].validated.last_offset,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            log_append_time=NO_TIMESTAMP,
            record_count=sum(run.validated.record_count for run in runs),
            size_bytes=sum(run.validated.size_bytes for run in runs),
            log_start_offset=self._log_start_offset(),
        )

    def _empty_append_info(self) -> AppendInfo:
        return AppendInfo(-1, -1, NO_TIMESTAMP, -1, NO_TIMESTAMP, 0, 0, self._log_start_offset())

    def _duplicate_append_info(self, duplicate: DuplicateAppend) -> AppendInfo:
        return AppendInfo(
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp,
            offset_of_max_timestamp=duplicate.last_offset,
            log_append_time=NO_TIMESTAMP,
            record_count=duplicate.last_offset - duplicate.first_offset + 1,
            size_bytes=0,
            log_start_offset=self._log_start_offset(),
            duplicate=True,
        )

    def _judge_producers(
        self,
        validated: ValidatedAppend,
        producer_batches: tuple[ProducerBatch, ...] | None,
        verify: TransactionVerifier | None = None,
    ) -> ProducerAppend | DuplicateAppend | None:
        """The producer state's verdict on an append (under the lock); None when no batch has a
        producer id. ``producer_batches`` defaults to those of the client headers, whose
        transactional batches ``verify`` checks first."""
        if producer_batches is None:
            batches = []
            next_offset = validated.first_offset
            for header in validated.headers:
                first_offset = next_offset
                next_offset += header.records_count
                if header.producer_id != NO_PRODUCER_ID:
                    if verify is not None and header.is_transactional:
                        verify(header.producer_id, header.producer_epoch)
                    batches.append(ProducerBatch(
                        header.producer_id, header.producer_epoch, header.base_sequence,
                        first_offset, next_offset - 1, header.max_timestamp,
                        header.is_transactional,
                    ))
            if not batches:
                return None
            producer_batches = tuple(batches)
        return self._producer_state.prepare(producer_batches, validated.last_offset + 1)

    def _write(
        self,
        validated: ValidatedAppend,
        now_ms: int,
        producer_batches: tuple[ProducerBatch, ...] | None = None,
        *,
        verify: TransactionVerifier | None = None,
        flush: bool = False,
    ) -> AppendInfo:
        """Judge the producers (``verify`` first), roll if due, write, and flush if ``flush``
        or ``flush.messages`` says so, before the new end is published. Under the lock. A
        duplicate writes nothing."""
        judged = self._judge_producers(validated, producer_batches, verify)
        if isinstance(judged, DuplicateAppend):
            return self._duplicate_append_info(judged)
        segment = self._local.active_segment
        if self._roll_due(segment, validated, now_ms):
            log.debug(
                "rolling log %s: segment %d has %d bytes, an append of %d bytes, max timestamp "
                "%d", self._local.directory, segment.base_offset, segment.size_bytes,
                validated.size_bytes, validated.max_timestamp,
            )
            segment = self.roll(self._local.end.offset)
        if not (flush or self._flush_due(validated.last_offset + 1)):
            return self._write_to(segment, validated, judged)
        # Durable before visible: the records are published only once fsynced, so that a
        # failed fsync (the log goes offline) never lets a reader see them.
        info = self._write_to(segment, validated, judged, publish=False)
        new_end = LogEnd(
            validated.last_offset + 1, segment.base_offset, segment.size_bytes,
            self._producer_state.first_unstable_offset,
        )
        self._local.flush(None, new_end.offset)
        self._local.publish_end(new_end)
        return info

    def _write_to(
        self,
        segment: Segment,
        validated: ValidatedAppend,
        judged: ProducerAppend | None,
        *,
        publish: bool = True,
    ) -> AppendInfo:
        """Write and index the append in the active ``segment``, record its producer state,
        publish the new log end (unless ``publish`` is False: the caller fsyncs first).

        A write that fails publishes nothing: the log end does not move past it, and the log
        goes offline when the failure was an I/O error (:meth:`LocalLog.append`).

        Order matters to lock-free readers: the ``.txnindex`` entries of aborted transactions
        are written before the marker that completes them, and the new end is published last,
        with the producer state's first unstable offset after the append (one value: a reader
        computes the LSO from one moment, so it never passes a transaction whose marker the
        reader cannot see, nor a transaction whose start it can).

        All or nothing: the ``.txnindex`` entries of an ABORT marker are written before the
        marker, and taken back if the marker's write fails (:meth:`LocalLog.append`).
        """
        self._maybe_assign_epoch(validated.partition_leader_epoch, validated.first_offset)
        aborted: list[AbortedTxn] = []
        if judged is not None:
            state = self._producer_state
            aborted = [
                AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                           state.last_stable_offset_for(txn))
                for txn in judged.completed_txns if txn.is_aborted
            ]
        self._local.append(
            segment,
            validated.last_offset,
            validated.max_timestamp,
            validated.shallow_offset_of_max_timestamp,
            validated.pieces,
            aborted,
        )
        state = self._producer_state
        if judged is not None:
            state.apply(judged)
        else:
            state.map_end_offset = validated.last_offset + 1
        if publish:
            self._local.publish_end(LogEnd(
                validated.last_offset + 1, segment.base_offset, segment.size_bytes,
                state.first_unstable_offset,
            ))
        return AppendInfo(
            first_offset=validated.first_offset,
            last_offset=validated.last_offset,
            max_timestamp=validated.max_timestamp,
            offset_of_max_timestamp=validated.shallow_offset_of_max_timestamp,
            log_append_time=validated.log_append_time,
            record_count=validated.record_count,
            size_bytes=validated.size_bytes,
            log_start_offset=self._log_start_offset(),
        )

    def _maybe_assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record a leader epoch's start before its first records are written (Kafka assigns
        before the segment append too: after a crash the cache may hold an entry at the log
        end, never lack one for a stored batch). A checkpoint that cannot be written takes
        the log offline, as a failed write does. Under the lock."""
        if epoch < 0 or not self._epoch_cache.needs_assign(epoch, start_offset):
            return
        try:
            self._epoch_cache.assign(epoch, start_offset)
        except StorageIOError as exc:
            self._local.io_failed(exc, "leader epoch checkpoint write")
            raise

    def _roll_due(self, segment: Segment, validated: ValidatedAppend, now_ms: int) -> bool:
        """Whether ``validated`` must go to a new segment (Kafka UnifiedLog.maybeRoll,
        LogSegment.shouldRoll and LogSegment.timeWaitedForRoll; docs/kafka-behaviours.md#roll)."""
        config = self._local.config  # one property call: every append asks
        return segment.should_roll(
            max_segment_bytes=config.segment_bytes,
            max_segment_ms=config.max_segment_ms,
            max_timestamp_in_messages=validated.max_timestamp,
            max_offset_in_messages=validated.last_offset,
            messages_size_bytes=validated.size_bytes,
            now_ms=now_ms,
        )

    def _flush_due(self, end_offset: int) -> bool:
        """Whether a log ending at ``end_offset`` holds ``flush.messages`` unflushed messages."""
        return end_offset - self._local.recovery_point >= self._local.config.flush_messages

    def roll(self, expected_next_offset: int | None) -> Segment:
        """Roll, under the lock (Kafka's ``UnifiedLog.roll``): the local log rolls,
        then the producer state takes its snapshot at the new segment's base offset and the
        flush below it is scheduled. An I/O error takes the log offline."""
        segment = self._local.roll(expected_next_offset)
        new_offset = segment.base_offset
        # Kafka's snapshot on roll, named by the new segment's base offset (the state reflects
        # every batch below it), written whatever the producers, as UnifiedLog.roll does: an
        # empty one (header, 0 entries) is what lets an unclean open of a log that never had a
        # producer start its scan at the latest roll instead of the log start (recovery.py,
        # pass 7). Not fsynced here: the roll holds the log's lock (and may run on an
        # append), and an fsync would stall every append behind it. As Kafka's scheduled
        # flushProducerStateSnapshot, the flush that moves the recovery point to this offset
        # fsyncs it first (flush: it runs off the append path), so the snapshot an unclean
        # open starts from (the latest at or below the recovery point) survives a power loss;
        # one lost before that flush costs a longer scan, never producer state.
        self._producer_state.map_end_offset = new_offset
        try:
            self._producer_state.take_snapshot(fsync=False)
        except BaseException as exc:
            if not isinstance(exc, StorageIOError) or ran_out_of_descriptors(exc) is None:
                self._local.io_failed(exc, "roll")
                raise
            # Written tmp + rename, so nothing of it is on disk; without it an unclean open
            # starts its scan at an older snapshot (longer, never wrong): not worth the roll.
            log.warning("log %s rolled to offset %d without its producer snapshot: no file "
                        "descriptor free (%s)", self._local.directory, new_offset, exc)
        else:
            self._local.note_unflushed_snapshot(new_offset)
        if self._flush_scheduler is not None:
            self._flush_scheduler(lambda: self._flush_after_roll(new_offset))
        return segment

    def _flush_after_roll(self, new_base_offset: int) -> None:
        """Kafka's ``flushUptoOffsetExclusive(newSegment.baseOffset)``, run by the scheduler."""
        with contextlib.suppress(LogClosedError):  # closed meanwhile: close flushed it all
            self._local.flush(new_base_offset, None)

