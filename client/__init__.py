"""stratalog.client: talk to a stratalog server from Python.

* :class:`Client` (asyncio) and :class:`SyncClient` (blocking): one method per RPC of the Broker
  service, plain Python values in and out, errors as :mod:`stratalog.client.errors` exceptions.
* :class:`Producer`: batches records per partition, encodes Kafka v2 batches client-side,
  compresses, partitions like a Kafka producer (murmur2 for keys, sticky otherwise), retries
  retriable errors, and resolves a future per record with its (partition, offset). Idempotent
  by default (each record stored once, in order); with a ``transactional_id``, transactions.
* :class:`TlsConfig` and :class:`Credentials`: TLS (and mTLS) towards the server, and a user
  and password or a token sent with every call (``Client(target, tls=..., auth=...)``).
* Clusters (issue 17): every client, Producer and Consumer takes one target or several
  bootstrap targets (``"db1:50051,db2:50051"`` or a list) and sends each partition's requests
  to its leader, following NOT_LEADER_OR_FOLLOWER and metadata refreshes
  (:mod:`stratalog.client.client`, "Routing"; :class:`~.metadata_cache.MetadataCache`).
* :class:`Consumer`: reads partitions from an offset, a timestamp, the beginning or the end,
  optionally following new records; per record or per batch; READ_COMMITTED or not; with a
  ``group_id``, as a member of a consumer group (committed offsets, rebalances).
  :class:`SyncConsumer`: the same behind blocking calls.

Quick start::

    async with Client("127.0.0.1:50051") as client:
        await client.create_topic("events", partitions=3)
        async with Producer(client) as producer:
            future = await producer.send("events", b"hello", key=b"user-1")
            print(await future)          # RecordMetadata(topic, partition, offset, timestamp)
        async with Consumer(client, "events", start="earliest") as consumer:
            async for record in consumer:
                print(record.partition, record.offset, record.value)
"""

from __future__ import annotations

from . import errors
from .acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from .bootstrap import bootstrap_targets
from .client import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TIMEOUT_S, Client
from .consumer import DEFAULT_FETCH_BYTES_MAX, Consumer, ConsumerClosedError, OffsetReset
from .credentials import Credentials, TlsConfig
from .errors import (
    BrokerUnavailableError,
    DeliveryTimeoutError,
    LeaderNotAvailableError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RequestTimeoutError,
    StratalogError,
    TopicAlreadyExistsError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from .fetched import ConsumedBatch, decode_fetched
from .metadata_cache import MetadataCache
from .partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive
from .producer import (
    DEFAULT_BATCH_BYTES_MAX,
    DEFAULT_BUFFER_BYTES_MAX,
    Producer,
    ProducerClosedError,
    RecordFuture,
    SendManyFuture,
)
from .sync_client import SyncClient
from .sync_consumer import SyncConsumer
from .transaction_manager import TransactionState, TransactionStateError
from .types import (
    AbortedTransaction,
    BrokerAddress,
    CleaningResult,
    ClusterMetadata,
    ConsumerRecord,
    FetchResult,
    Identity,
    OffsetAndTimestamp,
    PartitionInfo,
    PartitionLeadership,
    PartitionReassignment,
    ProduceResult,
    ProducerIdAndEpoch,
    ProducerRecord,
    RecordMetadata,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
)
from .wire import EARLIEST, LATEST, MAX_TIMESTAMP, FetchFormat, IsolationLevel

__all__ = [
    "DEFAULT_BATCH_BYTES_MAX",
    "DEFAULT_BUFFER_BYTES_MAX",
    "DEFAULT_FETCH_BYTES_MAX",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "EARLIEST",
    "LATEST",
    "MAX_TIMESTAMP",
    "AbortedTransaction",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "BrokerAddress",
    "BrokerUnavailableError",
    "CleaningResult",
    "Client",
    "ClusterMetadata",
    "ConsumedBatch",
    "Consumer",
    "ConsumerClosedError",
    "ConsumerRecord",
    "Credentials",
    "DeliveryTimeoutError",
    "FetchFormat",
    "FetchResult",
    "Identity",
    "IsolationLevel",
    "LeaderNotAvailableError",
    "MetadataCache",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OffsetReset",
    "PartitionInfo",
    "PartitionLeadership",
    "PartitionReassignment",
    "PatternType",
    "ProduceResult",
    "Producer",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProducerIdAndEpoch",
    "ProducerRecord",
    "RecordFuture",
    "RecordMetadata",
    "RequestTimeoutError",
    "ResourceType",
    "SendManyFuture",
    "StickyPartitioner",
    "StratalogError",
    "SyncClient",
    "SyncConsumer",
    "TlsConfig",
    "TopicAlreadyExistsError",
    "TopicInfo",
    "TopicPartition",
    "TransactionAbortedError",
    "TransactionDescription",
    "TransactionState",
    "TransactionStateError",
    "UnknownTopicOrPartitionError",
    "bootstrap_targets",
    "decode_fetched",
    "errors",
    "murmur2",
    "partition_for_key",
    "to_positive",
]
