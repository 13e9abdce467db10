"""The leader's bookkeeping of its followers: their progress, the high watermark, the ISR.

Kafka's ``Replica`` (one follower's fetch state) and the rules of ``Partition`` that use it,
as pure functions of that state and a clock value, so that they are tested without processes:

* **A follower's progress** (:meth:`FollowerState.update_fetch_state`, Kafka's
  ``Replica.updateFetchState``): each fetch session request tells the leader the follower's log end
  offset (its ``fetch_offset``: it has every record below). The follower was *caught up* at
  the time of a fetch when it asked for the leader's log end offset as the leader had it then,
  or, looking one fetch back, when it now asks for at least the log end the leader had at the
  previous fetch (it had read everything there was then, at the previous fetch's time)::

      fetch_offset >= leader LEO now               -> last_caught_up = this fetch's time
      fetch_offset >= leader LEO at last fetch     -> last_caught_up = last fetch's time

  ``last_caught_up_ms`` never goes back.

* **The high watermark** (:func:`high_watermark_of`, Kafka's ``maybeIncrementLeaderHW``): the
  least log end offset over the in-sync replicas, the leader's own included. A follower the
  leader has not heard from since it became leader counts as log end offset 0 (unknown), so
  the high watermark does not move until every in-sync follower fetched once. The ISR used is
  the *maximal* one: the committed ISR plus followers whose addition is being written to etcd
  (Kafka's ``maximalIsr``), so that the high watermark never passes a replica that may be in
  the ISR a moment later.

* **Shrinking** (:func:`out_of_sync_followers`, Kafka's ``getOutOfSyncReplicas``): a follower
  is out of sync when it is not at the leader's log end and was last caught up more than
  ``replica_lag_time_max_ms`` ago.

* **Expanding** (:func:`may_join_isr`, Kafka's ``isFollowerInSync``): a follower not in the
  ISR joins when its log end offset reached the high watermark and the start offset of the
  leader's current epoch (so that it holds everything the leader wrote as leader: it cannot
  miss records acknowledged before it joined).

Concurrency: plain values, no I/O; the leader's Partition (partition.py) calls these on the
event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["FollowerState", "high_watermark_of", "may_join_isr", "out_of_sync_followers"]

#: A follower the leader has not heard from yet: its log end offset is unknown.
UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica``): its log end offset as of
    its last fetch, when it was last caught up, and the leader's log end offset and clock at
    that fetch. A new leader starts every follower at unknown (-1), caught up "now" (Kafka's
    ``resetReplicaState`` for a follower in the ISR: it gets ``replica_lag_time_max_ms`` to
    fetch before it is taken out)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    log_start_offset: int = UNKNOWN_OFFSET

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int,
                           leader_log_end_offset: int, fetch_ms: int) -> None:
        """Record a fetch at ``fetch_offset`` made at ``fetch_ms``, while the leader's log
        ended at ``leader_log_end_offset`` (module docstring)."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, fetch_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_ms = fetch_ms

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_time_max_ms: int) -> bool:
        """At the leader's log end, or caught up within the last ``lag_time_max_ms``."""
        return (self.log_end_offset == leader_log_end_offset
                or now_ms - self.last_caught_up_ms <= lag_time_max_ms)


def high_watermark_of(leader_id: int, leader_log_end_offset: int, isr: Iterable[int],
                      followers: Mapping[int, FollowerState]) -> int:
    """The least log end offset over ``isr`` (the leader counts with its own; a member the
    leader knows nothing of counts as 0). Never above the leader's log end."""
    high_watermark = leader_log_end_offset
    for replica in isr:
        if replica == leader_id:
            continue
        state = followers.get(replica)
        offset = state.log_end_offset if state is not None else UNKNOWN_OFFSET
        high_watermark = min(high_watermark, max(offset, 0))
    return high_watermark


def out_of_sync_followers(leader_id: int, leader_log_end_offset: int, isr: Iterable[int],
                          followers: Mapping[int, FollowerState], now_ms: int,
                          lag_time_max_ms: int) -> set[int]:
    """The ISR members other than the leader that have not been caught up for more than
    ``lag_time_max_ms`` (a member with no state counts as never caught up)."""
    lagging = set()
    for replica in isr:
        if replica == leader_id:
            continue
        state = followers.get(replica)
        if state is None or not state.is_caught_up(leader_log_end_offset, now_ms,
                                                   lag_time_max_ms):
            lagging.add(replica)
    return lagging


def may_join_isr(state: FollowerState, high_watermark: int, leader_epoch_start_offset: int
                 ) -> bool:
    """Whether a follower outside the ISR may join it (module docstring)."""
    return (state.log_end_offset >= 0 and state.log_end_offset >= high_watermark
            and state.log_end_offset >= leader_epoch_start_offset)
