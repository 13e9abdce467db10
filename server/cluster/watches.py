"""etcd watches that follow the cluster's keys: a part's step runs as soon as its keys change.

Every cluster part follows etcd with a :class:`~.polling.Poller`: a step that re-reads what the
part needs (the broker list, the controller key, the ACLs, and as a fallback the topics and
partition states). A :class:`KeyWatch` keeps one etcd watch stream open on a key, a key prefix
or a key range and calls its ``on_change`` callbacks (each a poller's ``wake``) once per watch
response that carries events. For most parts the events are only a signal: the step re-reads
the keys itself, so its state has one source (its read) and a lost or duplicated event changes
nothing but when the step runs. The poll stays as the fallback (``cluster_poll_fallback_ms``):
a watch that is broken, or an event lost in a way etcd does not report, costs at most one
fallback interval.

**Events as data** (the cluster view: cluster_view.py). A watch given ``on_events`` hands it
each response's events (:class:`WatchEvent`: put or delete, key, value, mod revision), whole
(the fragments etcd splits a large response into are put back together first) and in etcd's
order (revision order; one transaction's events in its order), before ``on_change``. Such a
watch is also given ``resync``, which Kubernetes' informers call a re-list: before each creation
of the watch it brings the part's state to a revision R (a full read, or nothing when the state
is already known to be complete at R) and the watch starts at R + 1, so that no event after
the state is missed and none before it is delivered again. Every creation then calls
``on_change`` too (the other parts it wakes may have missed events while it was down).

The state machine of one watch::

    idle --start()--> creating --created--> watching --response with events--> on_change()
                       ^  ^                    |   |
                       |  |   compacted:       |   |  stream broken (etcd restarted, member
                       |  +-- from now, at once+   |  killed, endpoint switched, auth token
                       |                           v  refused, etcd member without a leader)
                       +-------------------- backoff (50 ms, doubling up to 2 s, reset once
                                              a watch is created again)

- **Created**: the first time (and after a compaction) the watch starts at etcd's current
  revision and ``on_change`` is called once: the part read its keys before the watch existed,
  so a change in between is found by that re-read. Later the watch resumes at the revision
  after the last event it delivered, so etcd replays what happened while the stream was down.
  With ``resync``, every creation starts where ``resync`` says (above).
- **Compacted** (etcd's ``ErrCompacted``: the resume revision is older than etcd's compaction):
  the events in between are gone; the watch is created again at once at the current revision
  (with ``resync``: after it), and its creation calls ``on_change`` (a re-read), as a
  Kubernetes informer re-lists.
- **Broken**: any error of the stream, or the stream ending, waits the backoff and creates the
  watch again (the resume revision moves only past whole responses, so a break between two
  fragments has etcd send the response again in full) through the session's client of that
  moment, so a session that moved to another
  etcd endpoint (session.py) takes the watches with it. Never a busy loop: every retry waits.
  The stream asks etcd to require a leader (as etcd's own client's ``WithRequireLeader``): an
  etcd member cut off from its quorum ends it rather than keep it open with no events.

Coalescing: ``on_change`` only sets the poller's wake flag; a burst of 1,000 changes wakes a
step that is not running yet once, and a step that is running once more after it ends (a
change during a read may have come after the read). Without ``on_events`` the events' values
are never buffered: a response is dropped once its revision is noted.

Bounds: one task and one gRPC stream per :class:`KeyWatch`, nothing queued (the request stream
sends one create request, then waits for the stop); etcd splits large responses (``fragment``),
and a watch with ``on_events`` holds the fragments of one response until its last: no more than
etcd put in that response (one transaction, at most ``--max-txn-ops`` operations, or one
deleted range: no more keys than a full read of the range returns). ``on_events`` is awaited
before the next response is read: etcd and gRPC's flow control hold the rest meanwhile.

Concurrency: event-loop only. :meth:`KeyWatch.stop` cancels the task and with it the stream
(etcd drops a watch whose stream closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from aetcd import rpc, utils

if TYPE_CHECKING:
    from .session import EtcdSession

__all__ = ["BACKOFF_INITIAL_S", "BACKOFF_MAX_S", "KeyWatch", "WatchEvent"]

logger = logging.getLogger(__name__)

#: The wait after the first break of a watch (seconds); doubled at each further failure.
BACKOFF_INITIAL_S = 0.05
#: The longest wait between two attempts to create a broken watch (seconds).
BACKOFF_MAX_S = 2.0

#: The gRPC metadata etcd's Go client sends with ``clientv3.WithRequireLeader`` (etcd's
#: ``rpctypes.MetadataRequireLeaderKey``).
_REQUIRE_LEADER = ("hasleader", "true")


class WatchEvent(NamedTuple):
    """One etcd watch event: a put (``deleted`` False) or a delete of ``key`` at
    ``mod_revision`` (for a delete, the revision of the delete; ``value`` is then empty)."""

    deleted: bool
    key: bytes
    value: bytes
    mod_revision: int


class WatchCanceledError(Exception):
    """etcd cancelled the watch for a reason other than compaction (permission denied, ...)."""


class KeyWatch:
    """One etcd watch on ``key`` (with ``prefix``, every key that starts with it; with
    ``range_end``, every key from ``key`` up to, not including, ``range_end``) that calls each
    of ``on_change`` when the keys changed, after ``on_events`` (if given) was handed the
    events; ``resync`` (if given) runs before each creation and returns the revision the watch
    resumes after (module docstring).

    Holds the revision to resume at and counters the tests and logs read; nothing durable.
    """

    def __init__(self, session: EtcdSession, key: bytes, on_change: Sequence[Callable[[], None]],
                 name: str, *, prefix: bool = False, range_end: bytes = b"",
                 on_events: Callable[[list[WatchEvent]], Awaitable[None]] | None = None,
                 resync: Callable[[], Awaitable[int]] | None = None) -> None:
        assert not (prefix and range_end), "a prefix or a range, not both"
        self._session = session
        self._key = key
        self._range_end = utils.prefix_range_end(key) if prefix else range_end
        self._on_change = tuple(on_change)
        self._on_events = on_events
        self._resync = resync
        self.name = name
        #: The revision a re-created watch starts at: one past the last event delivered
        #: (0: none yet, watch from the current revision).
        self.next_revision = 0
        #: Watches created (the first and every re-creation).
        self.created_count = 0
        #: Watch responses with events (each one ``on_change`` round).
        self.change_count = 0
        #: Times etcd said the resume revision was compacted.
        self.compacted_count = 0
        #: Times the stream broke (an error, or the stream ended).
        self.broken_count = 0
        #: Responses that were a fragment of a larger one, not its last (etcd's ``fragment``).
        self.fragment_count = 0
        self._watching = asyncio.Event()
        self._created_in_attempt = False  # the current attempt created a watch
        self._task: asyncio.Task[None] | None = None

    @property
    def watching(self) -> bool:
        """Whether a watch is created and its stream open now."""
        return self._watching.is_set()

    async def wait_watching(self) -> None:
        """Until a watch is created (tests; a start that wants the watch before it goes on)."""
        await self._watching.wait()

    def start(self, start_revision: int = 0) -> None:
        """Create the watch and keep it (once: a started watch is left as is). A non-zero
        ``start_revision`` resumes there instead of at the current revision (tests)."""
        if self._task is None:
            self.next_revision = start_revision
            self._task = asyncio.create_task(self._run_forever(), name=self.name)

    async def stop(self) -> None:
        """Cancel the watch and wait for its task to end (may be called before start)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._watching.clear()

    def _changed(self) -> None:
        for callback in self._on_change:
            callback()

    async def _run_forever(self) -> None:
        backoff_s = BACKOFF_INITIAL_S
        logged = False  # this outage was logged
        while True:
            self._created_in_attempt = False
            error: Exception | None = None
            try:
                if await self._watch_once():
                    continue  # compacted: watch again from now, at once (it cannot recur)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
            finally:
                self._watching.clear()
            self.broken_count += 1
            if self._created_in_attempt:
                backoff_s, logged = BACKOFF_INITIAL_S, False  # it worked: a new outage
            reason = (str(error) or type(error).__name__) if error else "the stream ended"
            if self.created_count and not logged:
                # Once per outage: the session already warns when etcd does not answer.
                logger.info("etcd watch %s broke (%s); creating it again, the poll covers"
                            " meanwhile", self.name, reason)
                logged = True
            else:
                logger.debug("etcd watch %s not created: %s", self.name, reason)
            # Jitter, so that the servers of a cluster do not all come back in step.
            await asyncio.sleep(backoff_s * random.uniform(0.5, 1.0))
            backoff_s = min(BACKOFF_MAX_S, backoff_s * 2)

    async def _watch_once(self) -> bool:
        """One stream: create the watch, follow it until it breaks. Returns True when etcd
        compacted the resume revision, False when it ended the stream; raises what the stream
        raised."""
        client = self._session.client
        await client.connect()  # the session's client connects (and authenticates) lazily
        if self._resync is not None:
            # The state is complete at this revision: the watch delivers what comes after.
            self.next_revision = await self._resync() + 1
        stop = asyncio.get_running_loop().create_future()
        create = rpc.WatchCreateRequest(key=self._key, range_end=self._range_end,
                                        start_revision=self.next_revision, fragment=True)

        async def requests() -> AsyncIterator[rpc.WatchRequest]:
            yield rpc.WatchRequest(create_request=create)
            await stop  # the stream stays open until this watch stops (cancelled with it)

        # etcd's require-leader flag: a member cut off from its quorum ends the stream ("no
        # leader") instead of keeping it open without events, so the watch is created again.
        metadata = (*(client.metadata or ()), _REQUIRE_LEADER)
        call = rpc.WatchStub(client.channel).Watch(requests(), metadata=metadata)
        fragments: list[rpc.Event] = []  # a response's events, until its last fragment
        try:
            async for response in call:
                if response.compact_revision:
                    # ErrCompacted: the events since next_revision are gone. Watch from now
                    # on; its creation wakes the step, which re-reads everything.
                    self.compacted_count += 1
                    logger.info("etcd watch %s: revision %d is compacted (etcd keeps from %d"
                                " on); re-reading and watching from the current revision",
                                self.name, self.next_revision, response.compact_revision)
                    self.next_revision = 0
                    return True
                if response.canceled:
                    raise WatchCanceledError(
                        f"etcd cancelled the watch: {response.cancel_reason or 'no reason'}")
                if response.created:
                    self.created_count += 1
                    self._watching.set()
                    self._created_in_attempt = True
                    if not self.next_revision:
                        # Watching from now: what changed before is found by a re-read.
                        self.next_revision = response.header.revision + 1
                        self._changed()
                    elif self._resync is not None:
                        self._changed()  # the others woken may have missed events meanwhile
                # Without on_events only the last event matters (its revision): keep no values.
                fragments.extend(response.events if self._on_events is not None
                                 else response.events[-1:])
                self.fragment_count += response.fragment
                if response.fragment or not fragments:
                    # Not the last fragment: the resume revision moves only past whole
                    # responses, so a break here has etcd send the response again in full.
                    continue
                events, fragments = fragments, []
                if self._on_events is not None:
                    await self._on_events([
                        WatchEvent(e.type == rpc.Event.DELETE, e.kv.key, e.kv.value,
                                   e.kv.mod_revision) for e in events])
                self.next_revision = events[-1].kv.mod_revision + 1
                self.change_count += 1
                self._changed()
            return False
        finally:
            call.cancel()
            if not stop.done():
                stop.cancel()
