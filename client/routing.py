"""What a client does after a request about a partition failed: send it again, and when.

One decision, shared by the async :class:`~stratalog.client.Client` and the blocking
:class:`~stratalog.client.SyncClient` (each does its own waiting and I/O), after Kafka's
``NetworkClient`` and ``Metadata`` (and KIP-951's leader hints):

=========================================  ==============================================
the error                                   what the client does
=========================================  ==============================================
NOT_LEADER_OR_FOLLOWER with a hint naming   :attr:`Reroute.NOW`: to that leader, at once,
another node                                the hint taken into the cache
NOT_LEADER_OR_FOLLOWER without a usable     :attr:`Reroute.AFTER_BACKOFF`: the topic is
hint, LEADER_NOT_AVAILABLE,                 marked stale; after ``retry_backoff_ms`` a
UNKNOWN_LEADER_EPOCH                        metadata refresh names the leader
the broker did not answer (UNAVAILABLE      AFTER_BACKOFF for a read (sent again is
without ErrorInfo, SHUTTING_DOWN), in a     harmless); :attr:`Reroute.RAISE` for a Produce
cluster (several targets or brokers)        (its append may have happened: the Producer
                                            resends it under its sequence numbers). Either
                                            way the topic is refreshed before its next
                                            request, and the broker is asked for metadata
                                            last until it answers again.
anything else, or a broker that did not     RAISE, the cache untouched (a single server:
answer when only one is known               nothing to learn)
=========================================  ==============================================

Nothing was done by a server that answered one of the routing errors, so a Produce too is sent
again at once. Pure: mutates only the cache it is given.
"""

from __future__ import annotations

import enum

from .errors import (
    BrokerUnavailableError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    ShuttingDownError,
    StratalogError,
    UnknownLeaderEpochError,
)
from .metadata_cache import MetadataCache

__all__ = ["REROUTES_MAX", "ROUTING_ERRORS", "UNANSWERED", "Reroute", "reroute"]

#: "This server does not lead the partition now": nothing was done; ask the leader.
ROUTING_ERRORS = (NotLeaderOrFollowerError, LeaderNotAvailableError, UnknownLeaderEpochError)

#: A broker that did not answer, or is stopping: another may lead the partition now.
UNANSWERED = (BrokerUnavailableError, ShuttingDownError)

#: Reroutes of one request without a deadline, at most (a request with one stops at it).
REROUTES_MAX = 100


class Reroute(enum.Enum):
    """When a failed request about a partition goes out again."""

    NOW = enum.auto()  # a hint named the leader
    AFTER_BACKOFF = enum.auto()  # after retry_backoff_ms, the topic refreshed first
    RAISE = enum.auto()  # not again: the error is the caller's


def reroute(
    cache: MetadataCache,
    error: StratalogError,
    *,
    topic: str,
    partition: int,
    refused_by: str | None,
    cluster: bool,
    resendable: bool,
) -> Reroute:
    """What to do after ``error`` answered a request about ``topic``-``partition`` sent to
    ``refused_by`` (an address; None when no broker was reached). ``cluster``: several
    bootstrap targets or brokers are known; ``resendable``: the request may be sent twice
    (a read). Updates ``cache`` with what the error says (a hint, a stale topic, a gone node,
    an unreachable address).
    """
    refused_node = None if refused_by is None else cache.node_at(refused_by)
    if isinstance(error, NotLeaderOrFollowerError):
        hint = error.leader_id
        if hint is not None and hint != refused_node and cache.apply_hint(
            topic, partition, hint, error.leader_epoch, error.leader_address
        ):
            return Reroute.NOW
        cache.invalidate(topic)
        return Reroute.AFTER_BACKOFF
    if isinstance(error, ROUTING_ERRORS):
        cache.invalidate(topic)
        return Reroute.AFTER_BACKOFF
    if isinstance(error, UNANSWERED) and cluster:
        if refused_by is not None:
            cache.mark_unreachable(refused_by)
        if refused_node is not None:
            cache.forget_node(refused_node)
        cache.invalidate(topic)
        return Reroute.AFTER_BACKOFF if resendable else Reroute.RAISE
    return Reroute.RAISE
