"""The group member's offsets bookkeeping: what it owns, where the reader is, what is committed.

Kafka's consumer keeps these in ``SubscriptionState``
(``clients/src/main/java/org/apache/kafka/clients/consumer/internals/SubscriptionState.java``):
per assigned partition, the *position* (the offset of the next record to hand to the reader)
and, here also, the last offset this member committed for it. A partition is in one of three
conditions:

* **awaiting** its start: newly assigned, the committed offset not yet fetched; no position.
  When none is committed it leaves this set without a position, until the driver seeks to
  the ``auto_offset_reset`` offset (or hands out records from there).
* **positioned**: it has a position; auto-commit commits it when it differs from the last
  committed offset.
* **revoking**: the member gives it up and commits its position first; records handed out
  from now on are not counted (their positions are not committed: at least once holds, the
  next owner reads them again).

Invariants (:meth:`check`): positions, committed offsets and the awaiting set concern owned
partitions only; revoking is a subset of owned; awaiting partitions have no position.

Positions only move when the driver says the reader was handed records (``handed_out``) or
sought (``seek``): never ahead of what the application has seen, so a commit never covers a
record it did not get. Plain dicts bounded by the number of owned partitions; not thread-safe
(the group member's one caller serialises).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from stratalog.client.types import TopicPartition

__all__ = ["ConsumedPositions"]


class ConsumedPositions:
    """Owned partitions, their positions and committed offsets (module docstring)."""

    def __init__(self) -> None:
        self.owned: frozenset[TopicPartition] = frozenset()
        self.revoking: frozenset[TopicPartition] = frozenset()
        self.awaiting: set[TopicPartition] = set()
        # partition -> (offset of the next record to hand out, leader epoch of the last one)
        self._positions: dict[TopicPartition, tuple[int, int]] = {}
        self._committed: dict[TopicPartition, int] = {}

    # -- Ownership -------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> frozenset[TopicPartition]:
        """Own ``partitions`` in addition; returns those new to this member (awaiting now)."""
        added = frozenset(partitions) - self.owned
        self.owned |= added
        self.awaiting |= added
        return added

    def start_revoking(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop counting records of ``partitions`` (owned ones): their commit is under way."""
        self.revoking |= frozenset(partitions) & self.owned

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget ``partitions`` entirely (revoked or lost)."""
        gone = frozenset(partitions)
        self.owned -= gone
        self.revoking -= gone
        self.awaiting -= gone
        for tp in gone:
            self._positions.pop(tp, None)
            self._committed.pop(tp, None)

    # -- Positions ---------------------------------------------------------------------------

    def handed_out(self, tp: TopicPartition, next_offset: int, leader_epoch: int = -1) -> bool:
        """The reader got the records of ``tp`` before ``next_offset``; False when ignored (not
        owned, revoking, or still awaiting its start)."""
        if tp not in self.owned or tp in self.revoking or tp in self.awaiting:
            return False
        self._positions[tp] = (next_offset, leader_epoch)
        return True

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        """Set the position of an owned partition (its start, or the application's seek)."""
        if tp not in self.owned:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this member")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset} for {tp.topic}-{tp.partition}")
        self.awaiting.discard(tp)
        self._positions[tp] = (offset, leader_epoch)

    def start_at_committed(self, tp: TopicPartition, offset: int, leader_epoch: int) -> None:
        """Start an awaiting partition at its committed offset (which is then not recommitted)."""
        self.seek(tp, offset, leader_epoch)
        self._committed[tp] = offset

    def fetched_none(self, tp: TopicPartition) -> None:
        """No committed offset: the partition waits for the driver's ``seek`` to its
        ``auto_offset_reset`` offset (it is no longer awaiting a fetch)."""
        self.awaiting.discard(tp)

    def position(self, tp: TopicPartition) -> int | None:
        entry = self._positions.get(tp)
        return None if entry is None else entry[0]

    def positions(self) -> dict[TopicPartition, tuple[int, int]]:
        return dict(self._positions)

    # -- Commits -----------------------------------------------------------------------------

    def uncommitted(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """Positions of ``partitions`` that differ from what this member last committed."""
        return {
            tp: self._positions[tp]
            for tp in sorted(partitions)
            if tp in self._positions and self._committed.get(tp) != self._positions[tp][0]
        }

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Record a successful commit (of owned partitions; others are not tracked)."""
        for tp, offset in offsets.items():
            if tp in self.owned:
                self._committed[tp] = offset

    def last_committed(self, tp: TopicPartition) -> int | None:
        return self._committed.get(tp)

    def check(self) -> None:
        """Assert the invariants of the module docstring (tests call it after every step)."""
        assert self.revoking <= self.owned, (self.revoking, self.owned)
        assert self.awaiting <= self.owned, (self.awaiting, self.owned)
        assert set(self._positions) <= self.owned, (self._positions, self.owned)
        assert set(self._committed) <= self.owned, (self._committed, self.owned)
        assert not (self.awaiting & set(self._positions)), (self.awaiting, self._positions)
