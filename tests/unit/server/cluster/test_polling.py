"""The shared poll loop of the cluster parts: a failing step is tried again, wake() runs the
next step at once, stop() ends the task."""

from __future__ import annotations

import asyncio

from stratalog.server.cluster.polling import Poller

# Longer than any test waits: a step that runs again did so because of a retry or a wake.
LONG_INTERVAL_S = 3600.0


async def test_a_failing_step_is_tried_again_at_the_next_tick() -> None:
    calls: list[int] = []

    async def step() -> None:
        calls.append(len(calls))
        if len(calls) < 3:
            raise ConnectionError("etcd down")

    poller = Poller(step, 0.001, "test-poller", "step not made")
    poller.start()
    while len(calls) < 4:
        await asyncio.sleep(0.001)
    await poller.stop()
    assert calls[:4] == [0, 1, 2, 3]


async def test_wake_runs_the_next_step_before_the_interval_ends() -> None:
    ran = asyncio.Queue[int]()
    count = 0

    async def step() -> None:
        nonlocal count
        count += 1
        ran.put_nowait(count)

    poller = Poller(step, LONG_INTERVAL_S, "test-poller", "step not made")
    poller.start()
    assert await asyncio.wait_for(ran.get(), 5) == 1  # at once
    poller.wake()
    assert await asyncio.wait_for(ran.get(), 5) == 2  # not an hour later
    await poller.stop()
    assert ran.empty()


async def test_stop_ends_a_step_in_flight_and_may_be_called_before_start() -> None:
    started = asyncio.Event()

    async def step() -> None:
        started.set()
        await asyncio.sleep(LONG_INTERVAL_S)

    idle = Poller(step, LONG_INTERVAL_S, "test-poller", "step not made")
    await idle.stop()  # never started: nothing to do
    poller = Poller(step, LONG_INTERVAL_S, "test-poller", "step not made")
    poller.start()
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(poller.stop(), 5)
