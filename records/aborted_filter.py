"""Which fetched batches a READ_COMMITTED reader drops: Kafka's consumer-side aborted filter.

A READ_COMMITTED fetch returns the batches below the last stable offset, control batches
included, and the list of aborted transactions overlapping them: ``(producer id, first offset)``
pairs from the segments' ``.txnindex`` (Kafka's ``FetchResponse.abortedTransactions``). The
reader, not the log, removes the aborted records, walking the batches in offset order as Kafka's
``CompletedFetch`` does::

    aborted = [(producer 7, first offset 10)]
    offset 10  data  pid 7 transactional   dropped: 7's aborted transaction began at or before it
    offset 12  data  pid 8 transactional   kept
    offset 15  ABORT pid 7 (control)       dropped (a marker); 7 is no longer aborted after it
    offset 16  data  pid 7 transactional   kept: a later transaction of 7

* An aborted transaction becomes *current* when a batch ending at or after its first offset is
  reached (a heap ordered by first offset); from then on that producer's transactional batches
  are dropped.
* The producer's ABORT marker ends it; a COMMIT marker of a producer that is not aborted changes
  nothing. Every control batch is dropped.
* Non-transactional batches are always kept (a producer's aborted transaction never holds them).

Sans-IO: headers and keys in, booleans out. Used by the server's decoded (RECORDS) fetches; the
same algorithm as the client's ``decode_fetched``.

Not thread-safe: one filter per fetch response, used in batch order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from .batch import BatchHeader
from .control import ControlRecordType, decode_control_key

__all__ = ["AbortedTransactionFilter"]


class AbortedTransactionFilter:
    """Kafka's READ_COMMITTED filter over the batches of one fetch response, in offset order.

    Holds the aborted transactions not reached yet (a heap of ``(first_offset, producer_id)``)
    and the producers whose aborted transaction is current. O(log n) per aborted transaction
    reached, O(1) per batch otherwise.
    """

    __slots__ = ("_aborted_producer_ids", "_pending")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: ``(producer_id, first_offset)`` of each aborted transaction."""
        self._pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._pending)
        self._aborted_producer_ids: set[int] = set()

    def skips(self, header: BatchHeader, first_key: bytes | None = None) -> bool:
        """Whether a reader drops the batch of ``header``: a control batch, or a transactional
        batch of a producer whose aborted transaction is current.

        ``first_key`` is the key of a control batch's first record (its marker type); it is read
        only for a control batch of an aborted producer, where an ABORT ends the transaction.

        Raises:
            CorruptRecordError, InvalidRecordError: that control key does not decode.
        """
        pending = self._pending
        last_offset = header.last_offset
        while pending and pending[0][0] <= last_offset:
            self._aborted_producer_ids.add(heapq.heappop(pending)[1])
        producer_id = header.producer_id
        if header.is_control:
            if producer_id in self._aborted_producer_ids and first_key is not None:
                _, control_type = decode_control_key(first_key)
                if control_type == ControlRecordType.ABORT:
                    self._aborted_producer_ids.discard(producer_id)
            return True
        return header.is_transactional and producer_id in self._aborted_producer_ids
