"""etcd watches that wake the cluster's pollers: a part's step runs as soon as its keys change.

Every cluster part follows etcd with a :class:`~.polling.Poller`: a step that re-reads what the
part needs (the broker list, the controller key, the topics and partition states, the ACLs).
A :class:`KeyWatch` keeps one etcd watch stream open on a key or a key prefix and calls its
``on_change`` callbacks (each a poller's ``wake``) once per watch response that carries events.
The step then re-reads the keys itself: the events are only a signal, never applied, so the
part's state has one source (its read) and a lost or duplicated event changes nothing but when
the step runs. The poll stays as the fallback (``cluster_poll_fallback_ms``): a watch that is
broken, or an event lost in a way etcd does not report, costs at most one fallback interval.

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
- **Compacted** (etcd's ``ErrCompacted``: the resume revision is older than etcd's compaction):
  the events in between are gone; the watch is created again at once at the current revision,
  and its creation calls ``on_change`` (a re-read), as a Kubernetes informer re-lists.
- **Broken**: any error of the stream, or the stream ending, waits the backoff and creates the
  watch again through the session's client of that moment, so a session that moved to another
  etcd endpoint (session.py) takes the watches with it. Never a busy loop: every retry waits.
  The stream asks etcd to require a leader (as etcd's own client's ``WithRequireLeader``): an
  etcd member cut off from its quorum ends it rather than keep it open with no events.

Coalescing: ``on_change`` only sets the poller's wake flag; a burst of 1,000 changes wakes a
step that is not running yet once, and a step that is running once more after it ends (a
change during a read may have come after the read). The events' values are never buffered: a
response is dropped once its revision is noted.

Bounds: one task and one gRPC stream per :class:`KeyWatch`, nothing queued (the request stream
sends one create request, then waits for the stop); etcd splits large responses (``fragment``).

Concurrency: event-loop only. :meth:`KeyWatch.stop` cancels the task and with it the stream
(etcd drops a watch whose stream closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

from aetcd import rpc, utils

if TYPE_CHECKING:
    from .session import EtcdSession

__all__ = ["BACKOFF_INITIAL_S", "BACKOFF_MAX_S", "KeyWatch"]

logger = logging.getLogger(__name__)

#: The wait after the first break of a watch (seconds); doubled at each further failure.
BACKOFF_INITIAL_S = 0.05
#: The longest wait between two attempts to create a broken watch (seconds).
BACKOFF_MAX_S = 2.0

#: The gRPC metadata etcd's Go client sends with ``clientv3.WithRequireLeader`` (etcd's
#: ``rpctypes.MetadataRequireLeaderKey``).
_REQUIRE_LEADER = ("hasleader", "true")


class WatchCanceledError(Exception):
    """etcd cancelled the watch for a reason other than compaction (permission denied, ...)."""


class KeyWatch:
    """One etcd watch on ``key`` (with ``prefix``, every key that starts with it) that calls
    each of ``on_change`` when the keys changed (module docstring).

    Holds the revision to resume at and counters the tests and logs read; nothing durable.
    """

    def __init__(self, session: EtcdSession, key: bytes, on_change: Sequence[Callable[[], None]],
                 name: str, *, prefix: bool = False) -> None:
        self._session = session
        self._key = key
        self._range_end = utils.prefix_range_end(key) if prefix else b""
        self._on_change = tuple(on_change)
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
                if response.events:
                    self.next_revision = response.events[-1].kv.mod_revision + 1
                    self.change_count += 1
                    self._changed()
            return False
        finally:
            call.cancel()
            if not stop.done():
                stop.cancel()
