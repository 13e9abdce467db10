"""The transactions of a partition replayed from its batches: open on data, close on marker.

Kafka's producer state follows each producer's transaction through the log
(``ProducerAppendInfo.appendDataBatch`` and ``appendEndTxnMarker``, replayed at load by
``ProducerStateManager``), and so does every reader that must know what is committed without a
broker: the storage engine's recovery (``server/storage/producer_state.py``'s ``load_batches``,
driven by ``recovery.py``) and the Spark connector's file mode (``spark/file_transactions.py``).
The rules, in offset order::

    transactional data batch of producer p    opens p's transaction at its base offset, unless
                                              one is open (later batches go into it)
    COMMIT or ABORT marker of producer p      closes p's open transaction: a CompletedTxn
                                              (first offset, the marker's offset, aborted or
                                              not); with none open, it closes nothing
    non-transactional batch                   nothing

    first unstable offset    the first offset of the earliest open transaction (None: none open)
    last stable offset       that, or the log end offset when no transaction is open: what a
                             read_committed reader may read below
    LSO of an aborted txn    when its marker is replayed: the first offset of the earliest
                             OTHER open transaction, or the marker's offset + 1 (what Kafka
                             writes in the ``.txnindex`` entry)

Example (producers 7 and 8)::

    offset 10  data  pid 7 transactional      7 opens at 10           first unstable 10
    offset 12  data  pid 8 transactional      8 opens at 12           first unstable 10
    offset 13  data  pid 7 transactional      (7's goes on)
    offset 15  ABORT pid 7                    CompletedTxn(7, 10, 15, aborted), its LSO 12
    offset 16  COMMIT pid 8                   CompletedTxn(8, 12, 16, committed)
    end 17                                    last stable offset 17

What a marker is (decoding its control record, what to do with one that does not decode) is
the caller's: the replay takes its producer, offset and outcome. Sans-IO; the state starts
from what a producer snapshot says was open (:meth:`TransactionReplay.begin` for each).

Not thread-safe: one replay per walk, fed in offset order.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CompletedTxn", "TransactionReplay"]


class CompletedTxn(NamedTuple):
    """A transaction a marker closed: its producer, first offset, marker offset, outcome."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class TransactionReplay:
    """The open transactions of one partition's producers, as its batches are replayed.

    Holds each open transaction by producer id (which one a batch continues or a marker
    closes), and by first offset for :attr:`ongoing`. Invariant: the two maps hold the same
    transactions (in a log no two transactions start at one offset; should a corrupt snapshot
    say so, the map by producer is the truth). O(1) per batch; the offsets that depend on
    every open transaction are O(open transactions).
    """

    __slots__ = ("_by_first_offset", "_by_producer")

    def __init__(self) -> None:
        self._by_producer: dict[int, int] = {}  # producer id -> first offset
        self._by_first_offset: dict[int, int] = {}  # first offset -> producer id

    @property
    def ongoing(self) -> dict[int, int]:
        """The open transactions: first offset -> producer id (read-only for callers)."""
        return self._by_first_offset

    def first_offset(self, producer_id: int) -> int | None:
        """The first offset of ``producer_id``'s open transaction, None when it has none."""
        return self._by_producer.get(producer_id)

    def begin(self, producer_id: int, first_offset: int) -> bool:
        """A transactional data batch of ``producer_id`` at ``first_offset`` (or a transaction
        a snapshot says is open): opens the producer's transaction there unless one is open.
        Returns whether it opened one."""
        if producer_id in self._by_producer:
            return False
        self._by_producer[producer_id] = first_offset
        self._by_first_offset[first_offset] = producer_id
        return True

    def end(self, producer_id: int, marker_offset: int, is_abort: bool) -> CompletedTxn | None:
        """A COMMIT (``is_abort`` False) or ABORT marker of ``producer_id`` at
        ``marker_offset``: closes its open transaction and returns it; None when none is open
        (a marker with no transaction open ends nothing, as in Kafka)."""
        first_offset = self._by_producer.pop(producer_id, None)
        if first_offset is None:
            return None
        if self._by_first_offset.get(first_offset) == producer_id:
            del self._by_first_offset[first_offset]
        return CompletedTxn(producer_id, first_offset, marker_offset, is_abort)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction; None when none is open."""
        return min(self._by_producer.values()) if self._by_producer else None

    def last_stable_offset(self, log_end_offset: int) -> int:
        """What a read_committed reader may read below: the first unstable offset, or
        ``log_end_offset`` (the offset after the last batch replayed) when none is open."""
        return min(self._by_producer.values(), default=log_end_offset)

    def last_stable_offset_for(self, completed: CompletedTxn) -> int:
        """The LSO recorded with an aborted transaction when its marker is replayed: the first
        offset of the earliest other open transaction, or the marker's offset + 1 (Kafka's
        ``ProducerStateManager.lastStableOffset(completedTxn)``)."""
        others = [
            offset for producer_id, offset in self._by_producer.items()
            if producer_id != completed.producer_id
        ]
        return min(others) if others else completed.last_offset + 1
