"""server/subscribe_budget.py: what Subscribe messages in flight may hold, all streams together.

The budget is checked against a plain model (a list of open leases) over random leases, holds
and releases, with ``check()`` after every step. The budget at work in a servicer:
test_service.py; the memory it bounds in a real server process:
tests/integration/test_server_client_limits.py.
"""

from __future__ import annotations

import random

from stratalog.server.subscribe_budget import Lease, SubscribeBudget

MIB = 1024 * 1024


def test_leases_take_what_is_free_then_one_batch() -> None:
    budget = SubscribeBudget(total_bytes=3 * MIB, message_bytes_max=MIB)
    first = budget.lease(8 * MIB)  # capped by the message limit
    assert first.max_bytes == MIB
    second = budget.lease(MIB // 2)  # what the stream asked for
    assert second.max_bytes == MIB // 2
    third = budget.lease(MIB)  # 1.5 MiB are free
    assert third.max_bytes == MIB
    assert budget.free_bytes == MIB // 2
    fourth = budget.lease(MIB)
    assert fourth.max_bytes == MIB // 2
    fifth = budget.lease(MIB)  # nothing free: one batch, whatever its size
    assert fifth.max_bytes == 0 and budget.free_bytes == 0
    budget.check()
    for lease in (first, second, third, fourth, fifth):
        lease.release()
    assert budget.in_use_bytes == 0 and budget.leases == 0
    budget.check()


def test_hold_counts_the_message_built_even_beyond_the_lease() -> None:
    budget = SubscribeBudget(total_bytes=MIB, message_bytes_max=MIB)
    lease = budget.lease(MIB)
    lease.hold(1000)  # a short read: the rest is free again at once
    assert budget.in_use_bytes == 1000
    other = budget.lease(MIB)
    assert other.max_bytes == MIB - 1000
    other.hold(2 * MIB)  # one batch larger than the lease is sent whole, and counted
    assert budget.free_bytes < 0
    assert budget.lease(MIB).max_bytes == 0  # the budget is over: one batch per message
    lease.release()
    lease.release()  # once only
    assert budget.in_use_bytes == 2 * MIB
    other.release()
    assert budget.in_use_bytes == 0  # (the 0-byte lease above still open)
    assert budget.leases == 1


def test_a_zero_budget_always_reads_one_batch() -> None:
    budget = SubscribeBudget(total_bytes=0, message_bytes_max=MIB)
    lease = budget.lease(MIB)
    assert lease.max_bytes == 0
    lease.hold(4096)
    assert budget.in_use_bytes == 4096
    lease.release()
    budget.check()


def test_random_leases_agree_with_a_plain_model() -> None:
    rng = random.Random(4)
    total, message_max = 10_000, 3_000
    budget = SubscribeBudget(total, message_max)
    open_leases: list[Lease] = []
    peak = 0  # the model's most in use since the last take_peak_bytes
    for step in range(5000):
        if step % 41 == 0:
            assert budget.take_peak_bytes() == peak
            peak = sum(lease.size_bytes for lease in open_leases)
        action = rng.random()
        if open_leases and action < 0.4:
            open_leases.pop(rng.randrange(len(open_leases))).release()
        elif open_leases and action < 0.7:
            lease = rng.choice(open_leases)
            lease.hold(rng.randrange(0, 2 * message_max))
        else:
            wanted = rng.randrange(1, 2 * message_max)
            free = total - sum(lease.size_bytes for lease in open_leases)
            lease = budget.lease(wanted)
            assert lease.max_bytes == min(wanted, message_max, max(free, 0))
            open_leases.append(lease)
        budget.check()
        assert budget.in_use_bytes == sum(lease.size_bytes for lease in open_leases)
        peak = max(peak, budget.in_use_bytes)
        assert budget.leases == len(open_leases)
    for lease in open_leases:
        lease.release()
    assert budget.in_use_bytes == 0 and budget.leases == 0


def test_a_connection_past_its_share_gets_no_lease_until_one_of_its_messages_is_taken() -> None:
    budget = SubscribeBudget(total_bytes=32 * MIB, message_bytes_max=MIB,
                             connection_bytes_max=2 * MIB)
    first = budget.lease(MIB, "ipv4:10.0.0.1:1")
    second = budget.lease(MIB, "ipv4:10.0.0.1:1")
    assert first is not None and second is not None
    first.hold(MIB)
    second.hold(MIB + 4096)  # one batch larger than its lease: sent whole
    assert budget.lease(MIB, "ipv4:10.0.0.1:1") is None  # the share is held
    other = budget.lease(MIB, "ipv4:10.0.0.2:1")  # another connection is not held back
    assert other is not None and other.max_bytes == MIB
    budget.check()
    first.release()
    third = budget.lease(MIB, "ipv4:10.0.0.1:1")
    assert third is not None and third.max_bytes == MIB - 4096  # what is left of the share
    for lease in (second, third, other):
        lease.release()
    assert budget.in_use_bytes == 0 and budget.leases == 0
    budget.check()


async def test_room_is_made_when_a_lease_of_the_connection_is_given_back() -> None:
    budget = SubscribeBudget(total_bytes=32 * MIB, message_bytes_max=MIB,
                             connection_bytes_max=MIB)
    held = budget.lease(MIB, "c")
    assert held is not None and budget.lease(MIB, "c") is None
    room = budget.room("c")
    assert budget.room("c") is room and not room.done()  # shared by the waiting streams
    held.release()
    assert room.done()
    assert budget.room("c").done()  # the connection holds nothing now
    budget.check()


def test_random_leases_of_connections_agree_with_a_plain_model() -> None:
    rng = random.Random(10)
    total, message_max, share = 10_000, 3_000, 4_000
    budget = SubscribeBudget(total, message_max, connection_bytes_max=share)
    open_leases: list[tuple[str, Lease]] = []
    for _ in range(5000):
        action = rng.random()
        if open_leases and action < 0.4:
            open_leases.pop(rng.randrange(len(open_leases)))[1].release()
        elif open_leases and action < 0.7:
            rng.choice(open_leases)[1].hold(rng.randrange(0, 2 * message_max))
        else:
            connection = rng.choice("abc")
            wanted = rng.randrange(1, 2 * message_max)
            free = total - sum(lease.size_bytes for _, lease in open_leases)
            left = share - sum(lease.size_bytes for c, lease in open_leases if c == connection)
            lease = budget.lease(wanted, connection)
            if left <= 0:
                assert lease is None
            else:
                assert lease is not None
                assert lease.max_bytes == min(wanted, message_max, max(free, 0), left)
                open_leases.append((connection, lease))
        budget.check()
    for _, lease in open_leases:
        lease.release()
    assert budget.in_use_bytes == 0 and budget.leases == 0
    budget.check()
