"""Producer id allocation: Kafka's ``ProducerIdManager``, with its blocks kept in our state log.

Every idempotent or transactional producer needs an id no other producer of this server ever had,
across restarts: a partition's producer state (and its ``.snapshot`` files) would otherwise take
a new producer for an old one and answer with its sequence numbers. Kafka's controller hands
brokers blocks of 1000 ids and records each block (``ProducerIdsRecord``) in its metadata log
before a broker uses it; here the coordinator's ``__transaction_state`` log plays that part::

    next_block_start = 3000 (from the log)         ids handed out: 3000, 3001, ... 3999
    -> persist ProducerIdsRecord(next_producer_id=4000), durably, before 3000 is handed out
    -> restart: the log says 4000; 3000..3999 are never handed out again (the unused ones are
       skipped, as Kafka skips the rest of a broker's block when it restarts)

Invariant: every id returned is below the ``next_producer_id`` of a block record that was
persisted before it was returned, and at or above the previous one: ids are unique across
restarts as long as the log keeps its latest block record (the coordinator rewrites it when it
compacts the log). Ids are int64; the last block ends at 2^63 - 1.

In cluster mode the ids must be unique across servers too: an idempotent producer sends to the
leaders of many partitions, each on its own broker, with the one producer id it got from
InitProducerId; two producers with the same id writing to one partition would be taken for one
(their sequence numbers would collide). :func:`cluster_producer_id` puts the node id above the
server's own counter::

    producer_id = node_id << 40 | local_id        local_id: this manager's next id

    bits 63      62..40 (23 bits)     39..0 (40 bits)
         0       node_id < 2^23       the server's own counter, < 2^40

so ids from different servers never collide, and each server's stay unique across its
restarts as before. Kafka's controller hands out blocks of ids from a cluster-wide counter
(ZooKeeper-era Kafka kept it in ``/latest_producer_id_block``); this needs no etcd round trip
and no etcd at all on the path, at the price of bounding node ids (``NODE_ID_MAX``, checked by
the settings) and a server's ids to 2^40 (a million ids a second for 12 days; the coordinator
then refuses with :class:`ProducerIdsExhaustedError`). Node 0's ids are the single-server ids:
a server that joins a cluster as node 0 keeps its own. The coordinator applies it
(``TransactionCoordinator(cluster_node_id=...)``), so that both front ends hand out the same ids.

Concurrency: thread-safe; :meth:`ProducerIdManager.generate` holds a lock while it persists a
new block (one write and fsync per ``block_size`` ids), so callers wait for it then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .errors import ProducerIdsExhaustedError

__all__ = [
    "LOCAL_ID_BITS",
    "PRODUCER_ID_BLOCK_SIZE",
    "PRODUCER_ID_MAX",
    "ProducerIdManager",
    "cluster_producer_id",
]

#: Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``.
PRODUCER_ID_BLOCK_SIZE = 1000
#: Java's Long.MAX_VALUE: producer ids are int64 in every batch header.
PRODUCER_ID_MAX = (1 << 63) - 1
#: Bits of a server's own counter in a cluster producer id.
LOCAL_ID_BITS = 40


class ProducerIdManager:
    """Hands out producer ids from blocks, persisting each block's end before its first id.

    ``persist_block(next_producer_id)`` must make the block durable (or raise, in which case no
    id of that block is handed out and the next call tries again). ``next_block_start`` is the
    ``next_producer_id`` of the latest persisted block (0 on a new server).
    """

    def __init__(
        self,
        persist_block: Callable[[int], None],
        next_block_start: int = 0,
        *,
        block_size: int = PRODUCER_ID_BLOCK_SIZE,
    ) -> None:
        assert next_block_start >= 0 and block_size > 0
        self._persist_block = persist_block
        self._block_size = block_size
        self._lock = threading.Lock()
        self._next_block_start = next_block_start
        self._next_id = next_block_start
        self._block_end = next_block_start  # exclusive: no block allocated yet

    @property
    def next_block_start(self) -> int:
        """The first id of the block after the current one: what the log records."""
        with self._lock:
            return self._next_block_start

    def generate(self) -> int:
        """A producer id never handed out before by this server.

        Raises:
            ProducerIdsExhaustedError: the next block would pass 2^63 - 1.
            Whatever ``persist_block`` raises (a StorageError): no id is handed out.
        """
        with self._lock:
            if self._next_id >= self._block_end:
                start = self._next_block_start
                end = start + self._block_size
                if end > PRODUCER_ID_MAX:
                    raise ProducerIdsExhaustedError(
                        f"no producer id block left: the next one would be [{start}, {end}), "
                        f"past {PRODUCER_ID_MAX}"
                    )
                self._persist_block(end)
                self._next_id, self._block_end, self._next_block_start = start, end, end
            producer_id = self._next_id
            self._next_id += 1
            return producer_id


def cluster_producer_id(node_id: int, local_id: int) -> int:
    """The cluster-wide id of ``local_id``, handed out by node ``node_id`` (module docstring).

    Raises:
        ProducerIdsExhaustedError: ``local_id`` needs more than :data:`LOCAL_ID_BITS` bits.
    """
    assert 0 <= node_id < 1 << (63 - LOCAL_ID_BITS), node_id
    if not 0 <= local_id < 1 << LOCAL_ID_BITS:
        raise ProducerIdsExhaustedError(
            f"node {node_id} has handed out 2^{LOCAL_ID_BITS} producer ids: none is left for"
            " it in cluster mode (docs/cluster.md, producer ids)"
        )
    return node_id << LOCAL_ID_BITS | local_id
