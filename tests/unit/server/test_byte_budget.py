"""server/byte_budget.py: bytes held against a limit, reservations waiting first come first
served, checked against a plain model."""

from __future__ import annotations

import asyncio
import random

import pytest

from stratalog.server.byte_budget import ByteBudget


async def test_a_reservation_that_does_not_fit_waits_its_turn() -> None:
    budget = ByteBudget("test_bytes_max", 100)
    assert budget.try_reserve(60) == 60
    assert budget.try_reserve(50) is None
    big = asyncio.create_task(budget.reserve(50))
    await asyncio.sleep(0)
    # A small one does not overtake the waiting large one.
    assert budget.try_reserve(10) is None
    small = asyncio.create_task(budget.reserve(10))
    await asyncio.sleep(0)
    assert not big.done() and not small.done()
    budget.release(60)
    assert await big == 50 and await small == 10
    assert budget.in_use_bytes == 60
    budget.check()


async def test_a_reservation_larger_than_the_budget_is_clamped_and_served_alone() -> None:
    budget = ByteBudget("test_bytes_max", 100)
    assert await budget.reserve(1000) == 100
    assert budget.free_bytes == 0
    budget.release(100)
    assert budget.take_peak_bytes() == 100 and budget.take_peak_bytes() == 0


async def test_a_cancelled_wait_takes_nothing_and_lets_the_next_one_in() -> None:
    budget = ByteBudget("test_bytes_max", 100)
    assert budget.try_reserve(90) == 90
    first = asyncio.create_task(budget.reserve(50))
    second = asyncio.create_task(budget.reserve(10))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == 10
    assert budget.in_use_bytes == 100
    budget.check()


async def test_an_estimate_adjusted_to_what_is_held() -> None:
    budget = ByteBudget("test_bytes_max", 100)
    taken = budget.try_reserve(40)
    assert taken == 40
    held = budget.adjust(taken, 130)  # more than estimated: over the total until released
    assert budget.in_use_bytes == 130 and budget.try_reserve(1) is None
    budget.release(budget.adjust(held, 20))
    assert budget.in_use_bytes == 0
    budget.check()


async def test_random_reservations_agree_with_a_plain_model() -> None:
    rng = random.Random(24)
    budget = ByteBudget("test_bytes_max", 1000)
    held: list[int] = []
    waiting: list[asyncio.Task[int]] = []
    for _ in range(2000):
        action = rng.random()
        if held and action < 0.4:
            budget.release(held.pop(rng.randrange(len(held))))
        elif action < 0.7:
            taken = budget.try_reserve(rng.randrange(0, 1500))
            if taken is not None:
                held.append(taken)
        else:
            waiting.append(asyncio.create_task(budget.reserve(rng.randrange(0, 1500))))
        await asyncio.sleep(0)
        for task in [task for task in waiting if task.done()]:
            waiting.remove(task)
            held.append(task.result())
        budget.check()
        assert budget.in_use_bytes == sum(held) <= budget.total_bytes
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
