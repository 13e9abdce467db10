"""Consumer groups served: the I/O around the sans-IO group coordinator (server/groups/).

Kafka's ``coordinator-common`` CoordinatorRuntime and ``GroupCoordinatorService`` for this
server (docs/groups.md, "Serving groups"):

* :mod:`.group_service`: :class:`GroupService`, the one serving layer the group RPCs call: finds a
  group's ``__consumer_offsets`` partition, creates the topic when first needed, checks commits.
* :mod:`.partition_coordinator`: one partition's coordinator: its requests, its writes (one
  writer task, acks=all), its timer, its load and unload.
* :mod:`.offsets_topic`: the topic's configs, and its records to and from the core's values.

Event-loop only. Below the gRPC front end: it never imports server/rpc or app.py (an
import-linter contract in pyproject.toml holds it), so a Kafka wire-protocol listener can call
the same GroupService.
"""

from __future__ import annotations

from .group_service import GroupService, group_config
from .offsets_topic import GROUP_METADATA_TOPIC
from .partition_coordinator import PartitionCoordinator

__all__ = ["GROUP_METADATA_TOPIC", "GroupService", "PartitionCoordinator", "group_config"]
