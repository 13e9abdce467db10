"""The partition-serving layer: how a partition is served, whichever front end asked.

Kafka's ``ReplicaManager`` and ``Partition`` with their delayed operations
(``core/src/main/scala/kafka/server/ReplicaManager.scala``, ``DelayedProduce.scala``,
``DelayedFetch.scala``; ``core/src/main/scala/kafka/cluster/Partition.scala``). The gRPC
servicer (server/rpc/service.py) checks a request's shape, calls here once and translates the
answer; a second front end would make the same calls. Every writer goes through here, and
here the readers wake::

    replica_manager.py   ReplicaManager: append_records, fetch_records, write_txn_markers,
                         delete_partitions, ...; leader checks; where the work runs
    partition.py         Partition: append lock, reader wake-up, transaction verifier,
                         acks=all waiters
    delayed_produce.py   acks=all produces waiting for the high watermark
    delayed_fetch.py     the wake-up long polls and Subscribe streams wait on
    admin_manager.py     AdminManager: create, delete and grow topics, alter their configs,
                         describe and list them, Metadata (auto-creation included)
    config_descriptions.py  DescribeConfigs' entries: values, sources, synonyms

Below it: the storage engine (server/storage/), the transaction coordinator
(server/transactions/) and the cluster's replicas (server/cluster/: roles, ISR, fetchers),
which tell it what changed through ``cluster.replica.ReplicaEvents``; nothing below calls
into a front end.
"""

from .admin_manager import AdminManager, ConfigOp, DescribedTopic
from .partition import Partition
from .replica_manager import (
    ACKS_ALL,
    FetchResult,
    PartitionRead,
    PartitionReadResult,
    ReplicaManager,
)

__all__ = ["ACKS_ALL", "AdminManager", "ConfigOp", "DescribedTopic", "FetchResult", "Partition",
           "PartitionRead", "PartitionReadResult", "ReplicaManager"]
