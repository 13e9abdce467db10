"""A transaction survives its partition's leader changing (KIP-890 part 1, asked by the
leader: server/transaction_service/append_verifier.py; docs/cluster.md, "Transactions"):
etcd and three real servers; the leadership moves by a reassignment that reorders the replicas
and a preferred-leader election (deterministic, nobody killed).

* The stratalog Producer (gRPC) and librdkafka's transactional producer (the Kafka listener)
  open a transaction on an RF=3 partition, send, the partition's leader moves, they send more
  and commit: the commit succeeds, and read_committed sees every record exactly once. The
  new leader was never told of the transactions (AllowTxnAppends went to the old one): it
  asked each producer's coordinator, one of them on another server (VerifyTxnAppend), the
  other on itself.
* The same with the authorizer on (the servers' calls go as the broker principal), and with
  the partition's leader killed (kill -9) instead of moved.
* TxnOffsetCommit after the group's ``__consumer_offsets`` partition moved (its group
  coordinator with it) since AddOffsetsToTxn: the new group coordinator asks too, and the
  offsets are committed with the transaction.
* The late-produce protection holds across the move: a transactional Produce after its
  transaction ended, or for a partition the transaction does not hold, is refused by the new
  leader (INVALID_TXN_STATE), and nothing is written.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from stratalog.client import Client, Producer, SyncClient, TopicPartition
from stratalog.client.errors import InvalidTxnStateError, StratalogError
from stratalog.client.groups.membership_messages import GroupMetadata
from stratalog.records.group_partition import partition_for_group
from stratalog.server.transactions.state_partitions import (
    CLUSTER_TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)
from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_cluster_acls import acl_flags  # noqa: F401  (a fixture)
from tests.cluster.test_faults import FAILOVER_BOUND_S, create_topic, start_cluster
from tests.cluster.test_transactions_cluster import (
    STATE_PARTITIONS,
    TXN_FLAGS,
    leaders,
    read_committed,
    transactional_producer,
)
from tests.cluster.test_transactions_grpc_cluster import LOAD_BOUND_S, init
from tests.integration.conftest import ServerProcess


def _replicas(server: ServerProcess, topic: str, partition: int = 0) -> list[int]:
    (found,) = [list(p.replicas) for t in metadata(server, topic).topics for p in t.partitions
                if p.partition == partition]
    return found


def move_leadership(servers: dict[int, ServerProcess], topic: str, to: int,
                    partition: int = 0) -> None:
    """Make ``to`` the preferred replica of ``topic``-``partition`` (a reassignment to the same
    replicas in another order, written at once), then elect it (ElectLeaders); wait until
    every server sees it lead."""
    replicas = _replicas(servers[1], topic, partition)
    order = [to, *(node for node in replicas if node != to)]
    key = (topic, partition)
    with SyncClient(servers[1].target) as client:
        assert client.alter_partition_reassignments({key: order}) == {key: None}
        wait_for(lambda: all(_replicas(s, topic, partition) == order
                             for s in servers.values()),
                 f"{topic}-{partition}'s replicas reordered to {order}")
        assert client.elect_leaders([key]) == {key: None}
    wait_for(lambda: all(leaders(s, topic)[partition] == to for s in servers.values()),
             f"node {to} leads {topic}-{partition}", FAILOVER_BOUND_S)


def _state_leaders(server: ServerProcess) -> dict[int, int]:
    return leaders(server, CLUSTER_TRANSACTION_STATE_TOPIC)


def _id_coordinated_by(server: ServerProcess, node: int, prefix: str) -> str:
    state = _state_leaders(server)
    return next(name for name in (f"{prefix}-{i}" for i in range(1000))
                if state[partition_for_transactional_id(name, STATE_PARTITIONS)] == node)


@pytest.mark.parametrize("secured", [False, True], ids=["plain", "acls"])
async def test_transactions_commit_across_a_leader_change(start_member, request, secured):
    """``acls``: the authorizer on and the servers calling each other as the broker principal
    (VerifyTxnAppend needs CLUSTER_ACTION, as the other TransactionMarkers calls)."""
    extra = request.getfixturevalue("acl_flags") if secured else ()
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS,
                                                              *extra))
    topic = f"mv-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic)
    targets = ",".join(s.target for s in servers.values())
    async with Client(targets) as client:
        await init(client, "probe")  # the state topic made
        wait_for(lambda: set(_state_leaders(servers[1]).values()) == set(servers),
                 "the state topic's partitions led by the three servers")
        old = leaders(servers[1], topic)[0]
        new = next(node for node in _replicas(servers[1], topic) if node != old)
        third = next(node for node in servers if node not in (old, new))
        # One producer's coordinator is the new leader (asked in-process), the other's the
        # third server (asked over VerifyTxnAppend).
        grpc_id = _id_coordinated_by(servers[1], third, "grpc-mover")
        kafka_id = _id_coordinated_by(servers[1], new, "kafka-mover")
        kafka = transactional_producer(servers, kafka_id)
        kafka.init_transactions(60)
        kafka.begin_transaction()
        async with Producer(client, transactional_id=grpc_id, linger_ms=1) as producer:
            await producer.begin_transaction()
            for n in range(5):
                await producer.send(topic, b"g-before-%d" % n, partition=0)
                kafka.produce(topic, value=b"k-before-%d" % n, partition=0)
            await producer.flush()
            kafka.flush(30)

            move_leadership(servers, topic, new)

            for n in range(5):
                await producer.send(topic, b"g-after-%d" % n, partition=0)
                kafka.produce(topic, value=b"k-after-%d" % n, partition=0)
            await producer.commit_transaction()
            kafka.commit_transaction(60)
    expected = sorted(b"%s-%s-%d" % (who, when, n) for who in (b"g", b"k")
                      for when in (b"before", b"after") for n in range(5))
    assert sorted(read_committed(servers, topic, 1)) == expected  # each exactly once


async def test_a_late_produce_is_refused_after_a_leader_change(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"mvl-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic, partitions=1)
    create_topic(servers[1], f"{topic}-other")
    targets = ",".join(s.target for s in servers.values())
    async with Client(targets) as client:
        await init(client, "probe")
        old = leaders(servers[1], topic)[0]
        new = next(node for node in _replicas(servers[1], topic) if node != old)
        transactional_id = "late-mover"
        producer_id, epoch = await init(client, transactional_id)
        await client.add_partitions_to_txn(transactional_id, producer_id, epoch, [(topic, 0)])
        await client.produce(topic, 0, [b"in"], producer_id=producer_id, producer_epoch=epoch,
                             base_sequence=0, transactional=True,
                             transactional_id=transactional_id)
        await client.end_txn(transactional_id, producer_id, epoch, commit=True)
        move_leadership(servers, topic, new)
        # A retry of a batch of the ended transaction reaches the new leader: it asks, the
        # coordinator says the transaction is over.
        with pytest.raises(InvalidTxnStateError):
            await client.produce(topic, 0, [b"late"], producer_id=producer_id,
                                 producer_epoch=epoch, base_sequence=1, transactional=True,
                                 transactional_id=transactional_id)
        # An open transaction that does not hold the partition: refused too.
        await client.add_partitions_to_txn(transactional_id, producer_id, epoch,
                                           [(f"{topic}-other", 0)])
        with pytest.raises(InvalidTxnStateError):
            await client.produce(topic, 0, [b"stray"], producer_id=producer_id,
                                 producer_epoch=epoch, base_sequence=1, transactional=True,
                                 transactional_id=transactional_id)
        await client.end_txn(transactional_id, producer_id, epoch, commit=False)
    # Nothing was appended by the refused batches: the LSO is the high watermark.
    assert read_committed(servers, topic, 1) == [b"in"]


def test_a_transaction_survives_its_partitions_leader_killed(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"mvk-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic)
    probe = transactional_producer(servers, "probe")
    probe.init_transactions(60)  # the state topic made
    old = leaders(servers[1], topic)[0]
    state = _state_leaders(servers[1])
    transactional_id = next(
        name for name in (f"killed-{i}" for i in range(1000))
        if state[partition_for_transactional_id(name, STATE_PARTITIONS)] not in (old, -1))
    producer = transactional_producer(servers, transactional_id)
    producer.init_transactions(60)
    producer.begin_transaction()
    for n in range(5):
        producer.produce(topic, value=b"before-%d" % n, partition=0)
    producer.flush(30)
    servers[old].kill()
    survivors = {node: server for node, server in servers.items() if node != old}
    some = next(iter(survivors.values()))
    wait_for(lambda: leaders(some, topic)[0] not in (old, -1), f"{topic}-0 led again",
             FAILOVER_BOUND_S)
    for n in range(5):
        producer.produce(topic, value=b"after-%d" % n, partition=0)
    producer.commit_transaction(FAILOVER_BOUND_S * 3)
    expected = sorted(b"%s-%d" % (when, n) for when in (b"before", b"after") for n in range(5))
    assert sorted(read_committed(survivors, topic, 1, FAILOVER_BOUND_S * 3)) == expected


async def test_transactional_offsets_commit_after_the_group_coordinator_moved(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"mvo-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic)
    offsets_topic, group = "__consumer_offsets", "mover-group"
    async with Client(",".join(s.target for s in servers.values())) as client:
        await init(client, "probe")
        transactional_id = "offsets-mover"
        retried: list[StratalogError] = []
        producer_id, epoch = await init(client, transactional_id)
        # The group's partition joins the transaction (the offsets topic made first: until
        # its partitions have leaders the answer is retriable): its leader is told.
        deadline = time.monotonic() + LOAD_BOUND_S
        while True:
            try:
                await client.add_offsets_to_txn(transactional_id, producer_id, epoch, group)
                break
            except StratalogError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.1)
        partition = partition_for_group(group, len(leaders(servers[1], offsets_topic)))
        old = leaders(servers[1], offsets_topic)[partition]
        new = next(n for n in _replicas(servers[1], offsets_topic, partition) if n != old)
        move_leadership(servers, offsets_topic, new, partition)
        # The new group coordinator loads its partition first (retriable answers meanwhile,
        # which a client retries), then asks the transaction's coordinator.
        deadline = time.monotonic() + LOAD_BOUND_S
        while True:
            try:
                await client.txn_offset_commit(transactional_id, producer_id, epoch,
                                               GroupMetadata(group, -1, "", None),
                                               {TopicPartition(topic, 0): 5})
                break
            except StratalogError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                retried.append(exc)
            await asyncio.sleep(0.1)
        await client.end_txn(transactional_id, producer_id, epoch, commit=True)
        committed = await client.offset_fetch(group, [(topic, 0)], require_stable=True)
    assert committed[TopicPartition(topic, 0)].offset == 5, retried
