"""The serving layer's Partition: its readers' wake-up and its append lock."""

from __future__ import annotations

import asyncio

from stratalog.server.broker import Partition


async def test_gate_signal_taken_before_a_read_sees_an_append_after_it() -> None:
    gate = Partition("t", 0)
    signal = gate.signal()  # a reader takes the signal, then reads (nothing yet) ...
    gate.wake_readers()  # ... an append lands between its read and its wait ...
    assert await gate.wait(signal, 0)  # ... and the wait returns at once: no lost wake-up.
    # A signal taken after that append waits for the next one.
    later = gate.signal()
    assert not await gate.wait(later, 0.01)


async def test_gate_wakes_every_waiter_and_close_wakes_them_for_good() -> None:
    gate = Partition("t", 0)
    waiters = [asyncio.create_task(gate.wait(gate.signal(), None)) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    gate.wake_readers()
    assert await asyncio.gather(*waiters) == [True, True, True]
    waiter = asyncio.create_task(gate.wait(gate.signal(), None))
    await asyncio.sleep(0)
    gate.close()
    assert await waiter
    assert gate.closed


async def test_append_lock_serialises_appenders() -> None:
    gate = Partition("t", 0)
    order: list[str] = []

    async def appender(name: str) -> None:
        async with gate.append_lock:
            order.append(f"{name} in")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            order.append(f"{name} out")

    await asyncio.gather(appender("a"), appender("b"), appender("c"))
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
