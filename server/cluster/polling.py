"""One step run now and every poll interval until stopped: how every cluster part follows etcd.

Membership (the broker list), the controller election, the cluster view, the controller's
leader elections and the cluster's ACLs each read etcd in a step run by a :class:`Poller`: at
once, then every ``interval_s`` (``cluster_poll_fallback_ms``) — and as soon as
:meth:`Poller.wake` is called, which an etcd watch on the step's keys does when they change
(watches.py); the cluster view's step is its full read, the fallback for a watch whose events
it applies itself (cluster_view.py). Wakes coalesce: a wake while no step runs runs one step;
any number of wakes during a step run exactly one more after it (a change during the step's
read may have come after the read), so a burst of etcd events costs one or two steps, not one
per event. A step that raises (etcd down or slow) is logged at DEBUG and tried again at the
next tick: what the step keeps (a view, a known controller) stays as it was, and nothing on
the data path waits for it.

Concurrency: event-loop only; one step at a time per poller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

__all__ = ["Poller"]

logger = logging.getLogger(__name__)


class Poller:
    """Runs ``step`` every ``interval_s`` in a task named ``name``; ``failed`` says, in the log,
    what did not happen when a step raised ("cluster view not refreshed")."""

    def __init__(self, step: Callable[[], Awaitable[object]], interval_s: float, name: str,
                 failed: str) -> None:
        self._step = step
        self._interval_s = interval_s
        self._name = name
        self._failed = failed
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the step now and then every interval (once: a started poller is left as is)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run_forever(), name=self._name)

    def wake(self) -> None:
        """Run the next step now rather than at the end of the interval."""
        self._wake.set()

    async def _run_forever(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # etcd down: tried again at the next tick
                logger.debug("%s: %s", self._failed, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()

    async def stop(self) -> None:
        """Cancel the task and wait for it to end (a step in flight is cancelled)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
