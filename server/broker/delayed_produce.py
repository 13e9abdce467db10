"""acks=all produces waiting until every in-sync replica has their records (delayed produce).

Kafka's ``DelayedProduce`` (``core/src/main/scala/kafka/server/DelayedProduce.scala``) with
``Partition.checkEnoughReplicasReachOffset``: a produce with acks=all to a replicated partition
is appended on the leader, then waits until the high watermark passed its last offset. It
completes

* with success: the high watermark reached ``required_offset`` with at least
  ``min.insync.replicas`` in the ISR;
* with NotEnoughReplicasAfterAppendError: the high watermark got there, but the ISR shrank
  below ``min.insync.replicas`` after the append;
* with NotLeaderOrFollowerError: the replica stopped leading;
* with ReplicationTimeoutError: not within ``request.timeout.ms``;
* with whatever :meth:`DelayedProduces.fail_all` is given (the server stops: SHUTTING_DOWN).

Whether one completes is checked (:meth:`DelayedProduces.try_complete`) whenever the replica
tells the serving layer that its high watermark, ISR or role changed
(``ReplicaEvents.replica_changed``), and once when the produce starts waiting.

Crash behaviour: nothing is kept; the records are in the leader's log, and an idempotent
producer's retry is answered as a duplicate.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from stratalog.server.cluster.errors import (
    NotEnoughReplicasAfterAppendError,
    ReplicationTimeoutError,
)
from stratalog.server.cluster.replica import Role

if TYPE_CHECKING:
    from stratalog.server.cluster.replica import Replica

__all__ = ["DelayedProduces"]


class _DelayedProduce:
    """An acks=all produce waiting until ``replica``'s high watermark passes
    ``required_offset``."""

    __slots__ = ("future", "min_insync", "replica", "required_offset")

    def __init__(self, replica: Replica, required_offset: int, min_insync: int) -> None:
        self.replica = replica
        self.required_offset = required_offset
        self.min_insync = min_insync
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class DelayedProduces:
    """The acks=all produces of one partition waiting for its high watermark (module
    docstring). Event-loop only."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[_DelayedProduce] = []

    async def wait(self, replica: Replica, required_offset: int, min_insync: int,
                   timeout_s: float) -> None:
        """Return once ``replica``'s high watermark reached ``required_offset`` (the last
        offset appended + 1) with at least ``min_insync`` in-sync replicas.

        Raises:
            NotEnoughReplicasAfterAppendError: the high watermark got there with the ISR
                below ``min_insync`` (it shrank after the append).
            ReplicationTimeoutError: not within ``timeout_s``.
            NotLeaderOrFollowerError: the replica stopped leading meanwhile.
        """
        waiter = _DelayedProduce(replica, required_offset, min_insync)
        self._waiting.append(waiter)
        self.try_complete()
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout_s)
        except TimeoutError:
            raise ReplicationTimeoutError(
                replica.topic, replica.partition,
                f"the in-sync replicas {sorted(replica.isr)} did not all reach offset "
                f"{required_offset - 1} within {timeout_s * 1000:.0f} ms (request.timeout.ms);"
                " the records are in the leader's log and may yet be replicated: retry with "
                "the idempotent producer",
            ) from None
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)

    def try_complete(self) -> None:
        """Complete the produces whose replica's high watermark passed their records, or that
        stopped leading."""
        if not self._waiting:
            return
        kept = []
        for waiter in self._waiting:
            if waiter.future.done():
                continue
            replica = waiter.replica
            if replica.role is not Role.LEADER:
                _fail(waiter, replica.not_leader())
            elif replica.log.high_watermark >= waiter.required_offset:
                if len(replica.isr) >= waiter.min_insync:
                    waiter.future.set_result(None)
                else:
                    _fail(waiter, NotEnoughReplicasAfterAppendError(
                        replica.topic, replica.partition,
                        f"the records were written, but the in-sync replica set "
                        f"{sorted(replica.isr)} shrank below min.insync.replicas="
                        f"{waiter.min_insync} before they were replicated",
                    ))
            else:
                kept.append(waiter)
        self._waiting = kept

    def fail_all(self, exc: Exception) -> None:
        """Complete every waiting produce with ``exc``."""
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if not waiter.future.done():
                _fail(waiter, exc)


def _fail(waiter: _DelayedProduce, exc: Exception) -> None:
    waiter.future.set_exception(exc)
    # Retrieved by the waiting produce; marked so that none is logged when the produce went
    # away first.
    waiter.future.exception()
