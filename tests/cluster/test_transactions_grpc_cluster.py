"""gRPC transactions on a three-server cluster (issue 29): the stratalog Client finds each
transactional id's coordinator (FindCoordinator, COORDINATOR_TYPE_TRANSACTION) whichever server
it was pointed at, and the Producer commits and aborts transactions over partitions led by
each server; a READ_COMMITTED consumer sees the committed transactions only."""

from __future__ import annotations

import asyncio
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from stratalog.client import Client, Producer, SyncClient
from stratalog.client.errors import StratalogError
from stratalog.server.transactions.state_partitions import (
    CLUSTER_TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)
from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_faults import create_topic, start_cluster

STATE_PARTITIONS = 5
TXN_FLAGS = ("--transaction-state-log-num-partitions", str(STATE_PARTITIONS))
#: How long a new coordinator may answer COORDINATOR_LOAD_IN_PROGRESS.
LOAD_BOUND_S = 60.0


async def init(client: Client, transactional_id: str) -> tuple[int, int]:
    """InitProducerId, retried while the id's coordinator loads (retriable answers)."""
    deadline = time.monotonic() + LOAD_BOUND_S
    while True:
        try:
            answer = await client.init_producer_id(transactional_id)
            return answer.producer_id, answer.producer_epoch
        except StratalogError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


def state_leaders(server) -> dict[int, int]:
    return {p.partition: p.leader for t in metadata(server, CLUSTER_TRANSACTION_STATE_TOPIC).topics
            for p in t.partitions}


async def test_the_client_finds_each_ids_coordinator(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"gtx-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic)
    committed: list[bytes] = []
    async with Client(servers[1].target) as client:
        await init(client, "probe")  # the first request makes the state topic
        wait_for(lambda: set(state_leaders(servers[1]).values()) == set(servers),
                 "the state topic's partitions led by the three servers")
        state = state_leaders(servers[1])
        ids: dict[int, str] = {}
        for i in range(100):
            name = f"writer-{i}"
            ids.setdefault(state[partition_for_transactional_id(name, STATE_PARTITIONS)], name)
        assert sorted(ids) == sorted(servers), ids
        for node, transactional_id in sorted(ids.items()):
            producer_id, epoch = await init(client, transactional_id)
            await client.add_partitions_to_txn(transactional_id, producer_id, epoch, [(topic, 0)])
            await client.end_txn(transactional_id, producer_id, epoch, commit=node != 2)
            described = await client.describe_transaction(transactional_id)
            assert described.state == ("CompleteCommit" if node != 2 else "CompleteAbort"), node
    consumer = Consumer({"bootstrap.servers": servers[1].kafka_bootstrap, "group.id": "g",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        # Three markers and no record: the last stable offset reached the high watermark.
        def at_end() -> bool:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                committed.append(message.value())
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
            return message is None and high == 3 and position == high
        wait_for(at_end, "the consumer at the end, past the three markers")
    finally:
        consumer.close()
    assert committed == []


async def test_the_producer_commits_and_aborts_across_partitions_led_by_each_server(
        start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"gpx-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic, partitions=3)
    targets = ",".join(s.target for s in servers.values())
    async with Client(targets) as client:
        await init(client, "probe")  # the state topic made, the coordinators loading
        async with Producer(client, transactional_id="grpc-writer", linger_ms=1) as producer:
            committed = []
            for number in range(4):
                await producer.begin_transaction()
                batch = [f"t{number}-p{p}".encode() for p in range(3)]
                for p, value in enumerate(batch):
                    await producer.send(topic, value, partition=p)
                if number % 2 == 0:
                    await producer.commit_transaction()
                    committed.extend(batch)
                else:
                    await producer.flush()
                    await producer.abort_transaction()
    consumer = Consumer({"bootstrap.servers": ",".join(
        s.kafka_bootstrap for s in servers.values()), "group.id": "gp",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen: list[bytes] = []
    try:
        def all_read() -> bool:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen.append(message.value())
            return len(seen) >= len(committed) and message is None
        wait_for(all_read, "the committed records")
    finally:
        consumer.close()
    assert sorted(seen) == sorted(committed)


def test_the_sync_client_finds_each_ids_coordinator(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"gsx-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic)
    with SyncClient(servers[1].target) as client:
        def init_sync(transactional_id: str) -> tuple[int, int]:
            answers = []

            def served() -> bool:
                try:
                    answers.append(client.init_producer_id(transactional_id))
                except StratalogError as exc:
                    if not exc.retriable:
                        raise
                    return False
                return True
            wait_for(served, f"InitProducerId of {transactional_id}", LOAD_BOUND_S)
            return answers[-1].producer_id, answers[-1].producer_epoch

        init_sync("probe")
        wait_for(lambda: set(state_leaders(servers[1]).values()) == set(servers),
                 "the state topic's partitions led by the three servers")
        state = state_leaders(servers[1])
        for node in sorted(servers):
            transactional_id = next(
                f"sync-{i}" for i in range(1000)
                if state[partition_for_transactional_id(f"sync-{i}", STATE_PARTITIONS)] == node)
            producer_id, epoch = init_sync(transactional_id)
            client.add_partitions_to_txn(transactional_id, producer_id, epoch, [(topic, 0)])
            client.end_txn(transactional_id, producer_id, epoch, commit=True)
            assert client.describe_transaction(transactional_id).state == "CompleteCommit"


async def test_partitions_a_coordinator_does_not_hold_join_its_transactions(start_member):
    """AddPartitionsToTxn asks the cluster's view, not the coordinator's disk: a partition
    whose only replica is on another server (the coordinator holds no log of its topic) joins;
    one that does not exist is refused."""
    from stratalog.client.errors import UnknownTopicOrPartitionError

    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"one-copy-{uuid.uuid4().hex[:8]}"
    async with Client(",".join(s.target for s in servers.values())) as client:
        await init(client, "probe")  # the first request makes the state topic
        wait_for(lambda: set(state_leaders(servers[1]).values()) == set(servers),
                 "the state topic's partitions led by the three servers")
        await client.create_topic(topic, 1, replication_factor=1)
        wait_for(lambda: [p.leader for t in metadata(servers[1], topic).topics
                          for p in t.partitions if p.leader > 0], "the topic has a leader")
        (holder,) = [p.leader for t in metadata(servers[1], topic).topics for p in t.partitions]
        state = state_leaders(servers[1])
        transactional_id = next(
            name for name in (f"elsewhere-{i}" for i in range(200))
            if state[partition_for_transactional_id(name, STATE_PARTITIONS)] != holder)
        producer_id, epoch = await init(client, transactional_id)
        await client.add_partitions_to_txn(transactional_id, producer_id, epoch, [(topic, 0)])
        await client.end_txn(transactional_id, producer_id, epoch, commit=True)
        assert (await client.describe_transaction(transactional_id)).state == "CompleteCommit"
        producer_id, epoch = await init(client, transactional_id)
        try:
            await client.add_partitions_to_txn(transactional_id, producer_id, epoch,
                                               [(topic, 7)])
        except UnknownTopicOrPartitionError as exc:
            assert "there is no partition 7" in str(exc)
        else:
            raise AssertionError("a partition that does not exist joined a transaction")
