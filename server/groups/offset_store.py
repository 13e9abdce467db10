"""The committed offsets of every group, and the offsets open transactions hold back.

As the ``Offsets`` tables of Kafka's ``group-coordinator/src/main/java/org/apache/kafka/
coordinator/group/OffsetMetadataManager.java``, without the timeline snapshots (our coordinator
applies a write only once the caller reports it durable, so it never rolls back)::

    committed[group][(topic, partition)]                  -> CommittedOffset
    pending[producer_id][group][(topic, partition)]       -> CommittedOffset
    open_transactions[group]                              -> {producer_id, ...}

The store is exactly what replaying ``__consumer_offsets`` yields: :meth:`replay_commit` and
:meth:`replay_tombstone` for its records, :meth:`replay_end_transaction` for a transaction's
COMMIT or ABORT marker on the partition. A transactional commit is pending (invisible to
OffsetFetch, and answered UNSTABLE_OFFSET_COMMIT under ``require_stable``, KIP-447) until its
marker; COMMIT moves it into ``committed`` unless a later plain commit of the partition was
written after it (``record_offset`` decides, so compaction cannot resurrect an older value),
ABORT drops it.

Invariants (:meth:`check`): ``open_transactions`` is exactly the (group, producer) pairs with
pending offsets; no table holds an empty inner map.

Crash behaviour: memory only; rebuilt by replay. Not thread-safe: the coordinator serialises.
"""

from __future__ import annotations

from typing import NamedTuple

from .group_records import OffsetCommitRecord

__all__ = ["CommitRow", "CommittedOffset", "OffsetStore", "TopicPartition"]

TopicPartition = tuple[str, int]


class CommittedOffset(NamedTuple):
    """One committed offset (Kafka's OffsetAndMetadata).

    ``record_offset`` is the offset in ``__consumer_offsets`` of the record that committed it:
    the order between a transactional and a plain commit of one partition.
    ``expire_timestamp_ms`` is -1 unless the commit set its own retention.

    A tuple, not a dataclass, because a load makes one per commit record (1,000,000 for a
    partition of as many): a tuple is built in a third of the time, and the C reader of a
    load's commits (records/consumer_offsets.py ``offset_commit_rows``) builds it directly and
    takes it off the garbage collector's lists, as it holds only ints and strings (CPython
    itself untracks only exact tuples, not a NamedTuple's), so the collections a load triggers
    do not scan a million of them again (docs/performance.md, "Issue 27: the group
    coordinator").
    """

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int
    record_offset: int

    @classmethod
    def from_record(cls, record_offset: int, record: OffsetCommitRecord) -> CommittedOffset:
        return cls(
            record.offset,
            record.leader_epoch,
            record.metadata,
            record.commit_timestamp_ms,
            record.expire_timestamp_ms,
            record_offset,
        )


#: One offset commit record of a load, as records/consumer_offsets.py's ``offset_commit_rows``
#: reads it: (group_id, (topic, partition), the committed offset, or None for a tombstone).
CommitRow = tuple[str, TopicPartition, CommittedOffset | None]


class OffsetStore:
    """Committed and pending offsets of every group (see the module docstring)."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self.open_transactions: dict[str, set[int]] = {}

    # -- reads ---------------------------------------------------------------------------------

    def get(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        return self.committed.get(group_id, {}).get((topic, partition))

    def group_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets (a copy), by (topic, partition)."""
        return dict(self.committed.get(group_id, {}))

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset of this partition for the group."""
        return any(
            (topic, partition) in self.pending[producer_id].get(group_id, {})
            for producer_id in self.open_transactions.get(group_id, ())
        )

    def has_open_transactions(self, group_id: str) -> bool:
        return group_id in self.open_transactions

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return {
            tp
            for producer_id in self.open_transactions.get(group_id, ())
            for tp in self.pending[producer_id].get(group_id, {})
        }

    # -- replay --------------------------------------------------------------------------------

    def replay_commit(self, record_offset: int, producer_id: int, record: OffsetCommitRecord) -> None:
        """Apply an OffsetCommit record written at ``record_offset`` (``producer_id`` -1: plain)."""
        value = CommittedOffset.from_record(record_offset, record)
        tp = (record.topic, record.partition)
        if producer_id < 0:
            self.committed.setdefault(record.group_id, {})[tp] = value
        else:
            self.pending.setdefault(producer_id, {}).setdefault(record.group_id, {})[tp] = value
            self.open_transactions.setdefault(record.group_id, set()).add(producer_id)

    def replay_commits(self, rows: list[CommitRow], producer_id: int) -> list[str]:
        """Apply consecutive OffsetCommit records of one producer (-1: plain) in order, as
        :meth:`replay_commit` and :meth:`replay_tombstone` one by one would (the last row of a
        key wins, a tombstone deletes); the ids of the groups that got a commit, each once per
        run of rows that name it (the caller makes the simple groups they imply).

        One loop over the rows, looking a group's offsets up once per run of its rows (a group
        commits many partitions at once): a load of a million commits makes one call per batch.
        O(len(rows)).
        """
        committed_groups: list[str] = []
        last_group: str | None = None
        if producer_id < 0:
            committed = self.committed
            by_partition: dict[TopicPartition, CommittedOffset] = {}
            for group_id, tp, value in rows:
                if value is None:
                    self.replay_tombstone(group_id, *tp)
                    last_group = None  # the tombstone may have removed the group's map
                    continue
                if group_id is not last_group:  # identity: C shares a run's string
                    last_group = group_id
                    committed_groups.append(group_id)
                    found = committed.get(group_id)
                    if found is None:
                        found = committed[group_id] = {}
                    by_partition = found
                by_partition[tp] = value
            return committed_groups
        for group_id, tp, value in rows:
            if value is None:
                self.replay_tombstone(group_id, *tp)
                continue
            if group_id is not last_group:
                last_group = group_id
                committed_groups.append(group_id)
            self.pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = value
            self.open_transactions.setdefault(group_id, set()).add(producer_id)
        return committed_groups

    def replay_tombstone(self, group_id: str, topic: str, partition: int) -> None:
        """Apply an OffsetCommit tombstone: the committed offset and any pending one go."""
        tp = (topic, partition)
        group = self.committed.get(group_id)
        if group is not None:
            group.pop(tp, None)
            if not group:
                del self.committed[group_id]
        for producer_id in self.open_transactions.get(group_id, ()):
            self.pending[producer_id].get(group_id, {}).pop(tp, None)

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        """Apply a COMMIT (``committed``) or ABORT marker of ``producer_id``'s transaction."""
        offsets = self.pending.pop(producer_id, None)
        if offsets is None:
            return
        for group_id in offsets:
            open_ids = self.open_transactions.get(group_id)
            if open_ids is not None:
                open_ids.discard(producer_id)
                if not open_ids:
                    del self.open_transactions[group_id]
        if not committed:
            return
        for group_id, by_partition in offsets.items():
            for tp, value in by_partition.items():
                existing = self.committed.get(group_id, {}).get(tp)
                # A plain commit written after the transactional one wins, as in Kafka.
                if existing is None or value.record_offset > existing.record_offset:
                    self.committed.setdefault(group_id, {})[tp] = value

    def delete_group(self, group_id: str) -> set[TopicPartition]:
        """The partitions a deletion of the group must write tombstones for (committed or pending)."""
        return set(self.committed.get(group_id, {})) | self.pending_partitions(group_id)

    def clear(self) -> None:
        """Forget every offset (the coordinator was unloaded)."""
        self.committed.clear()
        self.pending.clear()
        self.open_transactions.clear()

    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests)."""
        for by_partition in self.committed.values():
            assert by_partition
        expected: dict[str, set[int]] = {}
        for producer_id, by_group in self.pending.items():
            for group_id in by_group:
                expected.setdefault(group_id, set()).add(producer_id)
        assert expected == self.open_transactions, (expected, self.open_transactions)
