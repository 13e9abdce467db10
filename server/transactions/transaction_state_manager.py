"""The coordinator's durable state: Kafka's ``TransactionStateManager`` over ``__transaction_state``.

The state of every transactional id, and the producer id block, live in an internal partition
log of the server's own, in the same on-disk format as every topic (Kafka v2 record batches in
segments, see ``server/storage``), one record per state change (:mod:`.transaction_log`)::

    <log dir>/__transaction_state-0/00000000000000000000.log
      offset 0  key (0, "t1")  value Empty        epoch 0
      offset 1  key (0, "t1")  value Ongoing      [orders-0, orders-1]
      offset 2  key (32767)    value ProducerIds  next_producer_id=2000
      offset 3  key (0, "t1")  value PrepareCommit [orders-0, orders-1]
      offset 4  key (0, "t1")  value CompleteCommit
      offset 5  key (0, "t2")  null               t2 expired

The directory is the one log directory holding ``__transaction_state-0``, or the first one for a
new server; the LogManager leaves internal topics out of its catalogue and listings.

Loading replays the log from its start: the latest record of each key wins, a tombstone
removes the id. Kafka compacts this topic with its log cleaner; this log is not one of the
LogManager's (so not the cleaner's), and
:meth:`TransactionStateManager.maybe_compact` does what compaction would make of it: when the log
holds many more records than live keys, it rolls a segment, rewrites the latest record of every
key there, and deletes the segments before it. Replaying any prefix of the old records and then
the rewrite gives the rewrite's state, so a crash at any point of it loses nothing.

**A replicated partition** (cluster mode, :meth:`TransactionStateManager.load_replicated`):
the log is a partition of the cluster's state topic (:mod:`.state_partitions`), the
LogManager's, led by this server. The manager replays it up to the high watermark its leader
waited for, and every append goes through ``write`` (the caller's: an acks=all append to the
partition's leader, which returns once the in-sync replicas hold it) instead of to the log
directly; it never compacts (the topic is compacted by the log cleaner), holds no producer id
block (producer ids are this server's own, from its local log), and :meth:`close` leaves the
log open (it is not the manager's).

Crash behaviour: every append is fsynced before it returns (``flush_each_append``, on by
default; off, an append reaches the page cache only, which survives a process crash but not a
power loss). A state change is installed in memory only after its append returned, so the
memory never holds what the log does not. If the fsync fails after the write, the change is
in the log but not in memory: a restart applies it; the request failed, and its retry rewrites
the same transition.

Concurrency: thread-safe. One lock serialises appends, cache installs and compaction; reads
of the cache (:meth:`get`, :meth:`transactions`) take it briefly. Blocking (file I/O): call from
an executor, not an event loop. :meth:`get_by_producer_id` is the exception: it takes no lock
(the lock is held across an append's fsync, and a produce on the event loop must not wait for
one), reading a dict that writers replace entries of one at a time, under the GIL, with
immutable values.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from stratalog.records import BatchBuilder, iter_batches
from stratalog.records.errors import RecordError
from stratalog.server.storage.clock import wall_clock_ms
from stratalog.server.storage.config import LogConfig
from stratalog.server.storage.errors import LogClosedError, StorageError
from stratalog.server.storage.log_manager import TRANSACTION_STATE_TOPIC
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.topic_names import partition_dir_name

from .errors import CorruptTransactionLogError
from .transaction_log import (
    ProducerIdsKey,
    ProducerIdsValue,
    TransactionKey,
    decode_key,
    decode_producer_ids_value,
    decode_transaction_value,
    encode_producer_ids_key,
    encode_producer_ids_value,
    encode_transaction_key,
    encode_transaction_value,
)
from .transaction_metadata import TransactionMetadata, TransactionState

__all__ = [
    "COMPACT_RECORDS_MIN",
    "STATE_LOG_CONFIG",
    "TransactionStateManager",
]

log = logging.getLogger(__name__)

#: The one partition of the state log (Kafka has 50, one per coordinator; a single server
#: coordinates everything).
STATE_LOG_PARTITION = 0

#: The state log's config: Kafka's transaction.state.log.segment.bytes; no retention by time or
#: size (only compaction removes records); deleted segments go at once (nothing reads them).
STATE_LOG_CONFIG = LogConfig.from_mapping({
    "segment.bytes": 104857600,
    "retention.ms": -1,
    "retention.bytes": -1,
    "file.delete.delay.ms": 0,
})

#: Compaction waits until the log holds at least this many records, and more than twice the
#: live keys: replaying 10,000 small records is fast, rewriting on every change is not.
COMPACT_RECORDS_MIN = 10_000
# The records of one batch in a rewrite, at most (a batch must stay below max.message.bytes).
_REWRITE_BATCH_BYTES_MAX = 512 * 1024
# Bytes read per fetch while replaying.
_REPLAY_FETCH_BYTES = 1 << 20


class TransactionStateManager:
    """The ``__transaction_state`` log and the latest metadata of every transactional id.

    Holds: the open state log, the cache (transactional id -> latest logged metadata, Dead ids
    removed), the same metadata by producer id (for the produce path), the latest producer id
    block, and how many records were appended since the log was last compacted or opened.
    Invariants: the cache equals a replay of the log; every metadata in it has a state other
    than Dead and PrepareEpochFence; the producer id index holds exactly the cache's values,
    each under its own producer id (two ids never share one: producer ids are allocated once).
    """

    def __init__(
        self,
        partition_log: PartitionLog,
        transactions: dict[str, TransactionMetadata],
        next_producer_id: int,
        *,
        time_ms: Callable[[], int],
        flush_each_append: bool,
        broker_id: int,
        compact_records_min: int,
        write: Callable[[bytes], None] | None = None,
    ) -> None:
        """Use :meth:`open` or :meth:`load_replicated`."""
        self._log = partition_log
        # A replicated partition: appends go through ``write``; the log is not ours to close.
        self._write = write
        self._closed = False
        self._transactions = transactions
        self._by_producer_id = {m.producer_id: m for m in transactions.values()}
        self._next_producer_id = next_producer_id
        self._time_ms = time_ms
        self._flush_each_append = flush_each_append
        self._broker_id = broker_id
        self._compact_records_min = compact_records_min
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        log_dirs: Sequence[Path | str],
        *,
        time_ms: Callable[[], int] | None = None,
        flush_each_append: bool = True,
        broker_id: int = 0,
        compact_records_min: int = COMPACT_RECORDS_MIN,
        clean_log_dirs: Collection[Path] = (),
    ) -> TransactionStateManager:
        """Open (or create) the state log in ``log_dirs`` and replay it.

        ``clean_log_dirs``: the log directories whose clean-shutdown marker the LogManager found
        at this start (resolved paths, ``LogManager.had_clean_shutdown``). The marker is written
        only after this log closed without error (the server closes the coordinator first), so
        in such a directory the log opens as a clean one, without recovering its active segment;
        elsewhere (a crash, a directory of its own) the active segment is recovered.

        Raises:
            StorageError: the state log is in two log directories, or cannot be opened or read.
            CorruptTransactionLogError: a record does not decode (names the offset).
        """
        assert log_dirs, "at least one log directory"
        name = partition_dir_name(TRANSACTION_STATE_TOPIC, STATE_LOG_PARTITION)
        found = [Path(d) / name for d in log_dirs if (Path(d) / name).is_dir()]
        if len(found) > 1:
            raise StorageError(
                f"the transaction state log {name} exists in two log directories: "
                f"{found[0].parent} and {found[1].parent}"
            )
        directory = found[0] if found else Path(log_dirs[0]) / name
        clock = time_ms if time_ms is not None else wall_clock_ms
        # Not clean: None recovers the active segment only (it is small, and every append
        # before it was fsynced, so older segments are whole).
        clean = directory.parent.resolve() in clean_log_dirs or None
        partition_log = PartitionLog.open(directory, STATE_LOG_CONFIG, time_ms=clock,
                                          had_clean_shutdown=clean)
        try:
            transactions, next_producer_id = _replay(partition_log)
        except BaseException:
            partition_log.close()
            raise
        log.info("loaded the transaction state log %s: %d transactional ids, offsets [%d, %d), "
                 "next producer id block at %d", directory, len(transactions),
                 partition_log.log_start_offset, partition_log.log_end_offset, next_producer_id)
        return cls(partition_log, transactions, next_producer_id, time_ms=clock,
                   flush_each_append=flush_each_append, broker_id=broker_id,
                   compact_records_min=compact_records_min)

    @classmethod
    def load_replicated(
        cls,
        partition_log: PartitionLog,
        end_offset: int,
        write: Callable[[bytes], None],
        *,
        time_ms: Callable[[], int] | None = None,
    ) -> TransactionStateManager:
        """Replay a partition of the cluster's state topic below ``end_offset`` (its high
        watermark: what the in-sync replicas hold) and keep it; ``write(batches)`` appends
        from now on (module docstring). Blocking.

        Raises:
            StorageError: the log cannot be read.
            CorruptTransactionLogError: a record does not decode.
        """
        transactions, _ = _replay(partition_log, end_offset)
        log.info("loaded %s: %d transactional ids, offsets [%d, %d)", partition_log.directory,
                 len(transactions), partition_log.log_start_offset, end_offset)
        return cls(partition_log, transactions, 0,
                   time_ms=time_ms if time_ms is not None else wall_clock_ms,
                   flush_each_append=False, broker_id=-1, compact_records_min=0, write=write)

    # ---------------------------------------------------------------- reads

    @property
    def directory(self) -> Path:
        return self._log.directory

    @property
    def partition_log(self) -> PartitionLog:
        """The state log itself (for tests and tools: read-only use)."""
        return self._log

    @property
    def next_producer_id(self) -> int:
        """The ``next_producer_id`` of the latest producer id block record (0 when none)."""
        with self._lock:
            return self._next_producer_id

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """The latest logged metadata of ``transactional_id``; None if it has none."""
        with self._lock:
            return self._transactions.get(transactional_id)

    def transactions(self) -> list[TransactionMetadata]:
        """Every transactional id's latest metadata (a snapshot list)."""
        with self._lock:
            return list(self._transactions.values())

    def get_by_producer_id(self, producer_id: int) -> TransactionMetadata | None:
        """The latest logged metadata of the transactional id whose producer id is
        ``producer_id``; None when no transactional id has it (an idempotent producer's id, an
        id rotated away or expired). O(1), without a lock: see the module docstring."""
        return self._by_producer_id.get(producer_id)

    # ---------------------------------------------------------------- appends

    def append_transaction(self, metadata: TransactionMetadata) -> None:
        """Log ``metadata`` (a tombstone for Dead), then install it in the cache.

        Raises:
            StorageError: the append or its fsync failed; the cache is unchanged.
        """
        key = encode_transaction_key(metadata.transactional_id)
        dead = metadata.state is TransactionState.DEAD
        value = None if dead else encode_transaction_value(metadata)
        with self._lock:
            self._append([(key, value)])
            transactional_id = metadata.transactional_id
            previous = self._transactions.get(transactional_id)
            # Install the new entry before dropping a rotated-away producer id: a reader without
            # the lock never sees the id's current producer id missing.
            if dead:
                self._transactions.pop(transactional_id, None)
            else:
                self._transactions[transactional_id] = metadata
                self._by_producer_id[metadata.producer_id] = metadata
            if previous is not None and (dead or previous.producer_id != metadata.producer_id):
                self._by_producer_id.pop(previous.producer_id, None)

    def append_producer_ids(self, next_producer_id: int) -> None:
        """Log a producer id block ending before ``next_producer_id`` (durably, see above).

        Raises:
            StorageError: the append or its fsync failed.
        """
        value = ProducerIdsValue(self._broker_id, -1, next_producer_id)
        assert self._write is None, "a replicated partition holds no producer id blocks"
        with self._lock:
            assert next_producer_id > self._next_producer_id, "producer id blocks only grow"
            self._append([(encode_producer_ids_key(), encode_producer_ids_value(value))])
            self._next_producer_id = next_producer_id

    def _append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` in batches of at most _REWRITE_BATCH_BYTES_MAX; fsync if set."""
        now_ms = self._time_ms()
        batches = []
        builder = BatchBuilder()
        for key, value in records:
            if builder.estimated_size_bytes > _REWRITE_BATCH_BYTES_MAX:
                batches.append(builder.build())
                builder = BatchBuilder()
            builder.append(now_ms, key, value, ())
        batches.append(builder.build())
        if self._write is not None:
            if self._closed:
                raise LogClosedError(f"the transaction state of {self._log.directory.name} was"
                                     " unloaded: this server no longer coordinates it")
            self._write(b"".join(batches))
            return
        self._log.append(b"".join(batches))
        if self._flush_each_append:
            self._log.flush()

    # ---------------------------------------------------------------- compaction

    def maybe_compact(self) -> bool:
        """Rewrite the live records and drop the segments before them, when the log holds at
        least ``compact_records_min`` records and more than twice the live keys. Returns True
        if it did. Appends wait while it runs (one rewrite of every live key).

        Raises:
            StorageError: a roll, append, fsync or deletion failed (what was done is harmless:
                see the module docstring).
        """
        if self._write is not None:
            return False  # the topic's log cleaner compacts a replicated partition
        with self._lock:
            records = self._log.log_end_offset - self._log.log_start_offset
            live = len(self._transactions) + (1 if self._next_producer_id else 0)
            if records < self._compact_records_min or records <= 2 * live:
                return False
            rewrite_start = self._log.log_end_offset
            self._log.roll()
            rewrite = [
                (encode_transaction_key(metadata.transactional_id),
                 encode_transaction_value(metadata))
                for metadata in self._transactions.values()
            ]
            if self._next_producer_id:
                value = ProducerIdsValue(self._broker_id, -1, self._next_producer_id)
                rewrite.append((encode_producer_ids_key(), encode_producer_ids_value(value)))
            if rewrite:
                # Even when flush_each_append is off: the old segments go next.
                self._append(rewrite)
                self._log.flush()
            self._log.maybe_increment_log_start_offset(rewrite_start)
            self._log.delete_old_segments()
            self._log.maybe_delete_pending()
            log.info("compacted the transaction state log %s: %d records before offset %d "
                     "replaced by %d", self._log.directory, records, rewrite_start, len(rewrite))
            return True

    def close(self) -> None:
        """Flush and close the state log (a replicated partition's stays open: appends are
        refused from now on). Idempotent."""
        with self._lock:
            self._closed = True
            if self._write is None:
                self._log.close()

    @property
    def is_closed(self) -> bool:
        return self._closed or self._log.is_closed


def _iter_records(partition_log: PartitionLog, end: int
                  ) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the log start to ``end``."""
    offset = partition_log.log_start_offset
    while offset < end:
        fetched = partition_log.fetch(offset, _REPLAY_FETCH_BYTES)
        if not fetched.data:
            break
        try:
            for _, batch_records in iter_batches(fetched.data):
                for record in batch_records:
                    if offset <= record.offset < end:
                        yield record.offset, record.key, record.value
        except RecordError as exc:
            raise CorruptTransactionLogError(
                f"transaction state log {partition_log.directory}: the batches at offset "
                f"{offset} do not decode: {exc}"
            ) from exc
        offset = fetched.next_offset


def _replay(partition_log: PartitionLog, end: int | None = None
            ) -> tuple[dict[str, TransactionMetadata], int]:
    """The latest metadata of every live transactional id below ``end`` (None: the log end),
    and the latest block's next id."""
    transactions: dict[str, TransactionMetadata] = {}
    next_producer_id = 0
    end = partition_log.log_end_offset if end is None else end
    for offset, key, value in _iter_records(partition_log, end):
        try:
            decoded_key = decode_key(key)
            if isinstance(decoded_key, TransactionKey):
                transactional_id = decoded_key.transactional_id
                if value is None:
                    transactions.pop(transactional_id, None)
                else:
                    transactions[transactional_id] = decode_transaction_value(
                        transactional_id, value)
            else:
                assert isinstance(decoded_key, ProducerIdsKey)
                if value is None:
                    raise CorruptTransactionLogError("producer id block record has a null value")
                next_producer_id = max(next_producer_id,
                                       decode_producer_ids_value(value).next_producer_id)
        except CorruptTransactionLogError as exc:
            raise CorruptTransactionLogError(
                f"transaction state log {partition_log.directory}, record at offset {offset}: "
                f"{exc}"
            ) from exc
    return transactions, next_producer_id
