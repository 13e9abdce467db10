"""Producer ids that are unique across a cluster: the node id above a per-server counter.

An idempotent producer sends to the leaders of many partitions, each on its own broker, with
the one producer id it got from InitProducerId; two producers with the same id writing to one
partition would be taken for one (their sequence numbers would collide). A single server's ids
come from its coordinator's persisted blocks (server/transactions/producer_ids.py): unique on
that server, across restarts. In cluster mode InitProducerId answers::

    producer_id = node_id << 40 | local_id        local_id: the coordinator's next id

    bits 63      62..40 (23 bits)     39..0 (40 bits)
         0       node_id < 2^23       the server's own counter, < 2^40

so ids from different servers never collide, and each server's stay unique across its
restarts as before. Kafka's controller hands out blocks of ids from a cluster-wide counter
(ZooKeeper-era Kafka kept it in ``/latest_producer_id_block``); this needs no etcd round trip
and no etcd at all on the path, at the price of bounding node ids (``NODE_ID_MAX``, checked by
the settings) and a server's ids to 2^40 (a million ids a second for 12 days; the coordinator
then refuses with :class:`ProducerIdsExhaustedError`). Node 0's ids are the single-server ids:
a server that joins a cluster as node 0 keeps its own.
"""

from __future__ import annotations

from stratalog.server.transactions.errors import ProducerIdsExhaustedError

__all__ = ["LOCAL_ID_BITS", "cluster_producer_id"]

#: Bits of a server's own counter in a cluster producer id.
LOCAL_ID_BITS = 40


def cluster_producer_id(node_id: int, local_id: int) -> int:
    """The cluster-wide id of ``local_id``, handed out by node ``node_id``.

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
