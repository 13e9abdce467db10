"""Clients find leaders in a real cluster: etcd and three servers on 127.0.0.1 (issue 17).

Written against the shared design (docs/cluster.md): CreateTopic with ``replication_factor``,
leaders and ISRs in Metadata, NOT_LEADER_OR_FOLLOWER (with the leader hint) from a server that
does not lead a partition, the controller electing a new leader from the ISR once the old
one's session expired. The client is given ONE bootstrap target that is not the partition's
leader: everything it learns of the cluster it learns from the servers.

What is checked is what a user sees: every acknowledged record read back once, in order, after
kill -9 of the leader, by the producer that kept going and by a consumer that kept reading.
"""

from __future__ import annotations

import asyncio

from stratalog.client import Client, Consumer, Producer
from tests.integration.conftest import ServerProcess, until

from .conftest import SESSION_TIMEOUT_MS, metadata, wait_for

#: Generous bound on a failover here: the session timeout, the controller's poll, slack.
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 * 3 + 10
TOPIC = "routed"


def leadership(server: ServerProcess, topic: str) -> tuple[int, list[int]] | None:
    """(leader, isr) of the topic's partition 0 as ``server`` sees it, or None."""
    answer = metadata(server)
    for entry in answer.topics:
        if entry.name == topic and entry.partitions:
            partition = entry.partitions[0]
            return partition.leader, sorted(partition.isr)
    return None


async def read_all(target: str, count: int) -> list[bytes]:
    async with Consumer(target, TOPIC, start="earliest", follow=True) as consumer:
        values: list[bytes] = []
        async for record in consumer:
            values.append(record.value)
            if len(values) >= count:
                return values
    return values


async def test_producer_and_consumer_follow_the_leader_through_kill_9(start_member) -> None:
    servers = {node_id: start_member(node_id) for node_id in (1, 2, 3)}
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "three brokers registered")
    async with Client(servers[1].target) as admin:
        await admin.create_topic(TOPIC, partitions=1, replication_factor=3,
                                 configs={"min.insync.replicas": "2"})
    wait_for(lambda: (leadership(servers[1], TOPIC) or (-1, []))[1] == [1, 2, 3],
             "a leader and a full ISR")
    leader, _ = leadership(servers[1], TOPIC)  # type: ignore[misc]
    # One bootstrap target, and not the leader: the first request is refused with a hint.
    bootstrap = next(s.target for n, s in servers.items() if n != leader)

    first = [b"before-%03d" % i for i in range(100)]
    second = [b"after-%03d" % i for i in range(100)]
    async with Producer(bootstrap, linger_ms=0, delivery_timeout_ms=60_000) as producer:
        await (await producer.send_many(TOPIC, first, partition=0))
        # A consumer that reads the first half now, and must go on after the failover.
        reader = asyncio.create_task(read_all(bootstrap, len(first) + len(second)))
        # It read the first half and polls the leader at the end (its long polls, 500 ms
        # each, hold the gauge at 1 but for the moment between two of them).
        await until(lambda: servers[leader].waiting_rpcs("long_poll") >= 1,
                    "the consumer waiting at the leader's log end")
        servers[leader].kill()  # kill -9
        survivors = [s for n, s in servers.items() if n != leader]
        # The producer goes on: its sends wait out the election within the delivery timeout.
        await asyncio.wait_for(
            await producer.send_many(TOPIC, second, partition=0), FAILOVER_BOUND_S + 60
        )
    new_leader, isr = leadership(survivors[0], TOPIC)  # type: ignore[misc]
    assert new_leader not in (leader, -1) and leader not in isr
    # Every acknowledged record once, in order: by the consumer that kept reading...
    followed = await asyncio.wait_for(reader, 120)
    assert followed == first + second
    # ...and by a new one bootstrapped from a survivor.
    fresh = await asyncio.wait_for(read_all(survivors[1].target, len(first) + len(second)), 120)
    assert fresh == first + second
