"""The Kafka APIs, one module per area; importing this package registers every handler
(registry.py). Each module translates its requests into calls to the serving layer and back::

    api_versions.py   ApiVersions
    metadata.py       Metadata
    produce.py        Produce
    fetch.py          Fetch
    list_offsets.py   ListOffsets
    groups.py         FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
                      DescribeGroups, DeleteGroups
    offsets.py        OffsetCommit, OffsetFetch, OffsetDelete
"""

from stratalog.server.kafka.apis import (  # noqa: F401  (each registers its handlers)
    api_versions,
    fetch,
    groups,
    list_offsets,
    metadata,
    offsets,
    produce,
)
