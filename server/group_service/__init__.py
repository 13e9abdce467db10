"""Consumer groups served: the I/O around the sans-IO group coordinator (server/groups/).

Kafka's ``coordinator-common`` CoordinatorRuntime and ``GroupCoordinatorService`` for this
server (docs/groups.md, "Serving groups"):

* :mod:`.group_service`: :class:`GroupService`, the one serving layer the group RPCs call: finds a
  group's ``__consumer_offsets`` partition, creates the topic when first needed, checks commits.
* :mod:`.partition_coordinator`: one partition's coordinator: its requests, its writes (one
  writer task, acks=all), its timer, its load and unload.
* :mod:`.offsets_topic`: the topic's configs, and its records to and from the core's values.
* :mod:`.cluster_partitions`: the topic in a cluster: created in etcd, the coordinators of the
  partitions this server leads (the replica roles' ``LeadershipListener``), their leaders.

Event-loop only. Below the gRPC front end: it never imports server/rpc or app.py (an
import-linter contract in pyproject.toml holds it), so a Kafka wire-protocol listener can call
the same GroupService.
"""

from __future__ import annotations

from .cluster_partitions import ClusterPartitions, CoordinatorLocation
from .group_service import CLIENT_ID_CHARS_MAX, REQUEST_GROUP_IDS_MAX, GroupService, group_config
from .offsets_topic import GROUP_METADATA_TOPIC
from .partition_coordinator import PartitionCoordinator

__all__ = [
    "CLIENT_ID_CHARS_MAX",
    "GROUP_METADATA_TOPIC",
    "REQUEST_GROUP_IDS_MAX",
    "ClusterPartitions",
    "CoordinatorLocation",
    "GroupService",
    "PartitionCoordinator",
    "group_config",
]
