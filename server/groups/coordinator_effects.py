"""What the group coordinator asks of its caller, gathered over one call, and the timers it keeps.

Kafka's coordinator runtime gives its shards a ``CoordinatorResult`` (records to append, a
response) and a ``CoordinatorTimer`` (keyed timers that run an operation when they expire); this
is both, for a caller that does all I/O itself:

* :meth:`CoordinatorEffects.begin` starts a call at ``now_ms``; :meth:`end` returns its
  :class:`~.group_messages.Output`: the replies and appends gathered, and the next deadline.
* :meth:`append` hands out an append id and remembers what to run when the caller reports the
  write (:meth:`take_append`); appends are reported in issue order.
* Timers are keyed (``("heartbeat", group, member)``, ``("join", group)``, ...): scheduling a
  key again replaces it, cancelling forgets it. A heap of (deadline, sequence, key) orders them;
  an entry whose sequence is no longer its key's is stale and dropped when it reaches the top,
  so schedule, cancel and pop are O(log n) amortised.

Crash behaviour: memory only (timers are re-armed from the groups' state on load).
Concurrency: not thread-safe; owned by one coordinator, used by one caller.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from .group_errors import GroupError
from .group_messages import Append, Output, Reply
from .group_records import GroupRecord

__all__ = ["CoordinatorEffects", "PendingAppend", "TimerKey"]

TimerKey = tuple[str, ...]


@dataclass(slots=True)
class PendingAppend:
    """A write the caller is carrying out, and what to do when it reports back."""

    records: tuple[GroupRecord, ...]
    producer_id: int
    on_written: Callable[[int], None]
    on_failed: Callable[[GroupError], None]


class CoordinatorEffects:
    """The output of the call under way, the writes in flight, and the timers."""

    def __init__(self, now_ms: int) -> None:
        #: The clock of the call under way (never moves back: a stepped-back clock must not
        #: fire timers early or move deadlines back).
        self.now_ms = now_ms
        self._out = Output()
        self._appends: dict[int, PendingAppend] = {}
        self._next_append_id = 0
        self._timers: dict[TimerKey, tuple[int, int, Callable[[], None]]] = {}
        self._timer_heap: list[tuple[int, int, TimerKey]] = []
        self._timer_sequence = 0

    # -- one call ------------------------------------------------------------------------------

    def begin(self, now_ms: int) -> None:
        self.advance_clock(now_ms)
        self._out = Output()

    def advance_clock(self, now_ms: int) -> None:
        """Move the clock to ``now_ms`` (never back) without starting a call: for a replay,
        which asks nothing of the caller."""
        if now_ms > self.now_ms:
            self.now_ms = now_ms

    def end(self) -> Output:
        out = self._out
        out.next_deadline_ms = self.next_deadline_ms()
        self._out = Output()
        return out

    def reply(self, reply_to: Hashable, response: object) -> None:
        self._out.replies.append(Reply(reply_to, response))

    def add(self, reply: Reply | None) -> None:
        """Add a reply a group produced (None: it had no parked request to answer)."""
        if reply is not None:
            self._out.replies.append(reply)

    def replies(self, replies: list[Reply]) -> None:
        self._out.replies.extend(replies)

    # -- writes --------------------------------------------------------------------------------

    def append(
        self,
        records: tuple[GroupRecord, ...],
        on_written: Callable[[int], None],
        on_failed: Callable[[GroupError], None],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        """Ask the caller to write ``records``; ``on_written(first_offset)`` or
        ``on_failed(error)`` runs when it reports back."""
        append_id = self._next_append_id
        self._next_append_id += 1
        self._appends[append_id] = PendingAppend(records, producer_id, on_written, on_failed)
        self._out.appends.append(Append(append_id, records, producer_id, producer_epoch))

    def take_append(self, append_id: int) -> PendingAppend | None:
        """The write ``append_id`` reported back (None if it is no longer awaited)."""
        return self._appends.pop(append_id, None)

    def fail_all_appends(self, error: GroupError) -> None:
        """Fail every write in flight, and drop whatever their failure handlers ask to write."""
        pending, self._appends = list(self._appends.values()), {}
        for append in pending:
            append.on_failed(error)
        self._appends.clear()
        self._out.appends.clear()

    # -- timers --------------------------------------------------------------------------------

    def schedule(self, key: TimerKey, delay_ms: int, callback: Callable[[], None]) -> None:
        """Set (or replace) timer ``key`` to run ``callback`` ``delay_ms`` from now."""
        self._timer_sequence += 1
        deadline_ms = self.now_ms + delay_ms
        self._timers[key] = (deadline_ms, self._timer_sequence, callback)
        heapq.heappush(self._timer_heap, (deadline_ms, self._timer_sequence, key))

    def cancel(self, key: TimerKey) -> None:
        self._timers.pop(key, None)

    def has_timer(self, key: TimerKey) -> bool:
        return key in self._timers

    def pop_due_timer(self) -> Callable[[], None] | None:
        """Remove and return the earliest timer due at ``now_ms``, or None."""
        self._drop_stale_timers()
        if not self._timer_heap or self._timer_heap[0][0] > self.now_ms:
            return None
        _, _, key = heapq.heappop(self._timer_heap)
        _, _, callback = self._timers.pop(key)
        return callback

    def next_deadline_ms(self) -> int | None:
        """When the next timer is due (None: none is set)."""
        self._drop_stale_timers()
        return self._timer_heap[0][0] if self._timer_heap else None

    def clear_timers(self) -> None:
        self._timers.clear()
        self._timer_heap.clear()

    def _drop_stale_timers(self) -> None:
        heap = self._timer_heap
        while heap and self._timers.get(heap[0][2], (0, -1))[1] != heap[0][1]:
            heapq.heappop(heap)
