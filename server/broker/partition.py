"""One partition as the serving layer holds it: its append lock, its readers' wake-up, its
transaction verifier and its acks=all waiters.

The serving half of Kafka's ``Partition`` (``core/src/main/scala/kafka/cluster/
Partition.scala``: ``appendRecordsToLeader`` under ``leaderIsrUpdateLock``, and the
``DelayedOperations`` it completes); its replication half (role, ISR, high watermark) is
server/cluster/replica.py's, for a replicated partition. A single server is replication
factor 1 with itself as leader: it has no replica, and its reads stop at the log end.

* the *append lock*: appends (and DeleteRecords) to one partition are serialised with an
  ``asyncio.Lock``, held until the append is done wherever it runs (the ReplicaManager decides
  where: inline or in the thread pool, append_placement.py). Reads never take it
  (PartitionLog reads see only whole published batches);
* the *reader wake-up* (delayed_fetch.py): set by every write to the partition, whoever the
  writer (ReplicaManager.complete_delayed);
* the *transaction verifier*: the coordinator's check that a transactional batch belongs to an
  Ongoing transaction holding the partition, bound once per partition and handed to every
  append (the log runs it, for transactional batches only, under its lock);
* the *delayed produces* (delayed_produce.py): acks=all produces waiting for the high
  watermark.

Made by the ReplicaManager once the partition's log was found (unknown names never create
state), dropped and closed when the topic is deleted: its waiters wake and look it up again.

Crash behaviour: nothing here is durable.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .delayed_fetch import ReaderWakeup
from .delayed_produce import DelayedProduces

if TYPE_CHECKING:
    from stratalog.server.storage.partition_log import TransactionVerifier

__all__ = ["Partition"]


class Partition:
    """Event-loop state of one partition (module docstring): ``append_lock``, the readers'
    wake-up (:meth:`signal`, :meth:`wake_readers`, :meth:`wait`), ``closed``,
    ``verify_transaction`` (None: transactional batches are not checked) and
    ``delayed_produces``. Event-loop only."""

    __slots__ = ("_readers", "append_lock", "delayed_produces", "partition", "topic",
                 "verify_transaction")

    def __init__(self, topic: str, partition: int,
                 verify_transaction: TransactionVerifier | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.append_lock = asyncio.Lock()
        self._readers = ReaderWakeup()
        self.verify_transaction = verify_transaction
        self.delayed_produces = DelayedProduces()

    @property
    def closed(self) -> bool:
        """The partition was deleted: look it up again."""
        return self._readers.closed

    def signal(self) -> asyncio.Event:
        """The event the next write sets; take it *before* reading, then :meth:`wait` on it."""
        return self._readers.signal()

    wait = staticmethod(ReaderWakeup.wait)

    def wake_readers(self) -> None:
        """Wake everyone waiting for a write (or a marker) that happened."""
        self._readers.notify()

    def complete_delayed(self) -> None:
        """Something was written, or the high watermark, ISR or role changed: complete the
        acks=all produces it satisfies and wake the readers."""
        self.delayed_produces.try_complete()
        self._readers.notify()

    def close(self) -> None:
        """Wake every waiter for good: the partition is gone."""
        self._readers.close()
