"""Where a follower's log leaves its leader's, and where the follower truncates (KIP-320).

After a leader change a follower may hold records the new leader never had (the old leader
appended them with acks=1, or they never reached the ISR): they must go, and only they. The
high watermark cannot tell where they begin (KIP-101: truncating to it loses records that were
replicated, or keeps ones that diverge), the leader epochs can. Each fetch carries the epoch of
the follower's last batch (``last_fetched_epoch``); the leader answers with a *diverging epoch*
when its own history disagrees (:func:`diverging_epoch`, the leader's side of Kafka's
``Partition.fetchRecords``)::

    leader: (epoch, end) = end_offset_for_epoch(last_fetched_epoch)
            epoch < last_fetched_epoch or end < fetch_offset  ->  diverging (epoch, end)

    follower log:  [0 ... 99 e0][100 ... 149 e1]                  fetch_offset 150, last epoch 1
    leader log:    [0 ... 99 e0][100 .. 119 e1][120 ...... e2]    epoch 1 ended at 120
                   -> diverging (1, 120): the follower drops 120..149, then fetches at 120

and the follower truncates to what both logs agree on (:func:`truncation_offset`, Kafka's
``AbstractFetcherThread.getOffsetTruncationState``): when it knows the leader's epoch, to the
lesser of the two ends of that epoch; when it does not (its own largest epoch below is
another), to the end of its own epoch and asks again, so that a few rounds walk the epochs back
until the logs agree (KIP-279).

Pure functions of offsets and epochs, no I/O; the leader epoch cache (server/storage) supplies
the ``end_offset_for_epoch`` answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from stratalog.server.storage.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

__all__ = ["DivergingEpoch", "Truncation", "diverging_epoch", "truncation_offset"]


class DivergingEpoch(NamedTuple):
    """The leader's epoch at or below the follower's last one, and where it ends."""

    epoch: int
    end_offset: int


class Truncation(NamedTuple):
    """Where the follower truncates; ``complete`` False: fetch again, the leader checks anew."""

    offset: int
    complete: bool


EndOffsetForEpoch = Callable[[int], tuple[int, int]]


def diverging_epoch(last_fetched_epoch: int, fetch_offset: int,
                    end_offset_for_epoch: EndOffsetForEpoch) -> DivergingEpoch | None:
    """The leader's side: None when the follower's log agrees with the leader's up to
    ``fetch_offset`` as far as epochs tell (or it has no epoch yet: an empty log), else where
    the follower must truncate to (module docstring)."""
    if last_fetched_epoch < 0:
        return None
    epoch, end_offset = end_offset_for_epoch(last_fetched_epoch)
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return DivergingEpoch(epoch, end_offset)
    return None


def truncation_offset(diverging: DivergingEpoch, log_end_offset: int, high_watermark: int,
                      end_offset_for_epoch: EndOffsetForEpoch) -> Truncation:
    """The follower's side: the offset to truncate its log to after the leader answered with
    ``diverging`` (module docstring). ``end_offset_for_epoch`` is the follower's own cache.

    The one case where epochs cannot decide is a leader with no epoch at or below the
    follower's (``diverging`` undefined: the follower's latest epoch is above every one the
    leader knows, which only a leader that lost its log can cause): then, as Kafka does, the
    follower falls back to its high watermark.
    """
    if diverging.end_offset == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(high_watermark, log_end_offset), True)
    if diverging.epoch == UNDEFINED_EPOCH:
        return Truncation(min(diverging.end_offset, log_end_offset), True)
    own_epoch, own_end = end_offset_for_epoch(diverging.epoch)
    if own_end == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(diverging.end_offset, log_end_offset), True)
    if own_epoch != diverging.epoch:
        # This log never had the leader's epoch: its own largest epoch below ends at own_end;
        # cut there and let the leader judge the epoch before (KIP-279).
        return Truncation(min(own_end, log_end_offset), False)
    return Truncation(min(diverging.end_offset, own_end, log_end_offset), True)
