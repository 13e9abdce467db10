"""KIP-951's leader hints: who leads a partition, told to a client that asked the wrong server.

A Produce (v10+) or Fetch (v12+) partition answered NOT_LEADER_OR_FOLLOWER (or, for Fetch,
FENCED_LEADER_EPOCH) carries ``current_leader`` (the leader's node id and epoch as this server
knows them; -1 and -1 when it knows none), and a Produce answer (v10+; Fetch from v16, not served) lists the Kafka endpoint of
each leader it names in ``node_endpoints``, so that the client goes there without waiting for
a Metadata refresh (``clients/src/main/resources/common/message/ProduceResponse.json``,
``FetchResponse.json``). The hint is the serving layer's: server/cluster/errors.py's
``NotLeaderOrFollowerError`` carries the leader from this server's view of etcd, and a
``FencedLeaderEpochError`` raised by the leader carries itself and its epoch.

Concurrency: pure functions; event-loop callers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stratalog.server.cluster.errors import FencedLeaderEpochError, NotLeaderOrFollowerError

if TYPE_CHECKING:
    from stratalog.server.settings import Address

__all__ = ["leader_hint", "node_endpoints"]

#: No leader known (the schemas' defaults).
_UNKNOWN = (-1, -1)


def leader_hint(error: BaseException | None) -> tuple[int, int]:
    """``(leader_id, leader_epoch)`` for a partition's answer: the leader a
    NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH error names (Kafka's ``KafkaApis`` hints
    both), else (-1, -1)."""
    if isinstance(error, (NotLeaderOrFollowerError, FencedLeaderEpochError)):
        leader_id = getattr(error, "leader_id", None)  # a FencedLeaderEpochError may name none
        if leader_id is not None and leader_id >= 0:
            return leader_id, error.leader_epoch
    return _UNKNOWN


def node_endpoints(leader_ids: set[int], brokers: dict[int, Address]) -> list[tuple[int, Address]]:
    """The Kafka endpoint of each leader in ``leader_ids`` that has one (``brokers``: the
    live servers' Kafka listeners), by node id."""
    return [(node_id, brokers[node_id]) for node_id in sorted(leader_ids) if node_id in brokers]
