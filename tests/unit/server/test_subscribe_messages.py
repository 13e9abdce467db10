"""server/rpc/subscribe_messages.py: one message per reading, shared by the streams that make it;
gone with its last holder; a failed builder lets the others read for themselves."""

from __future__ import annotations

import asyncio

import pytest

from stratalog.server.rpc.subscribe_messages import Built, SharedMessages

MESSAGE = Built(b"m" * 100, 7, True, 3, 90)


async def test_the_streams_of_one_reading_send_the_builders_message() -> None:
    shared = SharedMessages()
    builder = shared.join("reading")
    waiters = [shared.join("reading") for _ in range(3)]
    assert builder.builder and not any(w.builder for w in waiters)
    other = shared.join("another reading")
    assert other.builder  # a reading of its own
    waiting = [asyncio.create_task(w.wait()) for w in waiters]
    await asyncio.sleep(0)
    assert not any(task.done() for task in waiting)
    builder.publish(MESSAGE)
    got = await asyncio.gather(*waiting)
    assert all(built is MESSAGE for built in got)
    assert got[0].message is got[1].message  # one bytes object for every stream
    # The entry lives while a stream holds it, and goes with the last.
    builder.release()
    late = shared.join("reading")
    assert not late.builder and await late.wait() is MESSAGE
    for share in (*waiters, late):
        share.release()
        share.release()  # a second release does nothing
        shared.check()
    assert set(shared.entries) == {"another reading"}
    other.release()
    assert not shared.entries


async def test_a_builder_that_fails_lets_the_others_read_for_themselves() -> None:
    shared = SharedMessages()
    builder = shared.join("reading")
    waiter = shared.join("reading")
    waiting = asyncio.create_task(waiter.wait())
    await asyncio.sleep(0)
    builder.release()  # failed (or cancelled) before it published
    assert await waiting is None
    waiter.release()
    assert not shared.entries


async def test_a_cancelled_waiter_does_not_cancel_the_builders_message() -> None:
    shared = SharedMessages()
    builder = shared.join("reading")
    first, second = shared.join("reading"), shared.join("reading")
    cancelled = asyncio.create_task(first.wait())
    waiting = asyncio.create_task(second.wait())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    first.release()
    builder.publish(MESSAGE)
    assert await waiting is MESSAGE
    for share in (builder, second):
        share.release()
    shared.check()
    assert not shared.entries
