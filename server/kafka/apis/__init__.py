"""The Kafka APIs, one module per area; importing this package registers every handler
(registry.py). Each module translates its requests into calls to the serving layer and back::

    api_versions.py   ApiVersions
    metadata.py       Metadata
    produce.py        Produce
    fetch.py          Fetch
    list_offsets.py   ListOffsets
    leader_epochs.py  OffsetForLeaderEpoch
    admin_topics.py   CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords
    configs.py        DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
    cluster_info.py   DescribeCluster
    elect_leaders.py  ElectLeaders
    groups.py         FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
                      DescribeGroups, DeleteGroups
    offsets.py        OffsetCommit, OffsetFetch, OffsetDelete
    reassignments.py  AlterPartitionReassignments, ListPartitionReassignments
    transactions.py   InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
                      TxnOffsetCommit
    sasl.py           SaslHandshake, SaslAuthenticate
    acls.py           CreateAcls, DescribeAcls, DeleteAcls
"""

from stratalog.server.kafka.apis import (  # noqa: F401  (each registers its handlers)
    acls,
    admin_topics,
    api_versions,
    cluster_info,
    configs,
    elect_leaders,
    fetch,
    groups,
    leader_epochs,
    list_offsets,
    metadata,
    offsets,
    produce,
    reassignments,
    sasl,
    transactions,
)
