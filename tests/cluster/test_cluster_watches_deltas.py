"""The cluster view kept by its watch's events (server/cluster/cluster_view.py, watches.py),
against a real etcd, in this process: an ISR change, a partition added and a topic deleted
reach the view as events, without a full read; a stream broken by an etcd restart is followed
by one full read that finds what changed meanwhile; a resume revision etcd compacted makes a
full read too; deletes while etcd no longer holds the cluster's id are not applied (the view
kept whole) until the id is back, and a view told another id reads everything at once; a large
deletion's events (etcd's fragments) arrive whole; a refresh reads only what changed, unless a
key was deleted. Neither the view's reads nor the ACLs' refresh is an etcd transaction (etcd's
own counter says so): etcd 3.5.0-3.5.4 panic when a read-only one is cancelled.

The fallback poll is an hour: a change that reaches the view did so through the watch, or the
full read the test names.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator

import pytest

from stratalog.server.cluster.cluster_acls import EtcdAclStore
from stratalog.server.cluster.cluster_view import ClusterView, PartitionKey
from stratalog.server.cluster.layout import ClusterKeys
from stratalog.server.cluster.partition_state import PartitionState, TopicAssignment
from stratalog.server.cluster.session import EtcdSession
from stratalog.server.cluster.watches import KeyWatch
from stratalog.server.security.acl_store import encode_acls
from stratalog.server.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

from .conftest import EtcdProcess
from .test_watches_stream import LONG_INTERVAL_S, WAIT_S, until

KEYS = ClusterKeys("/v")
CLUSTER_ID = "test-cluster-id"


async def create_topic(session: EtcdSession, name: str, partitions: int) -> None:
    """CreateTopic's writes (topic_admin.py), at most 127 partitions per transaction."""
    client = session.client
    assignment = TopicAssignment({p: (1, 2, 3) for p in range(partitions)})
    ops = [client.transactions.put(KEYS.topic(name), assignment.encode())]
    ops += [client.transactions.put(KEYS.partition(name, p), PartitionState(1, 0, (1, 2, 3)).encode())
            for p in range(partitions)]
    for start in range(0, len(ops), 128):
        await client.transaction(compare=[], success=ops[start:start + 128], failure=[])


class Following:
    """A view, its watch and what its listener was told."""

    def __init__(self, session: EtcdSession) -> None:
        self.view = ClusterView(session, KEYS, LONG_INTERVAL_S)
        self.view.expect_cluster_id(CLUSTER_ID)
        self.watch: KeyWatch = self.view.watch()
        self.changed: list[tuple[set[str], set[PartitionKey]]] = []
        self.view.add_listener(self._listen)

    async def _listen(self, topics: set[str], partitions: set[PartitionKey]) -> None:
        self.changed.append((topics, partitions))

    async def start(self) -> None:
        await self.view.refresh()
        self.view.start()
        self.watch.start()
        await asyncio.wait_for(self.watch.wait_watching(), WAIT_S)

    async def stop(self) -> None:
        await self.watch.stop()
        await self.view.close()

    def isr(self, topic: str, partition: int) -> tuple[int, ...] | None:
        versioned = self.view.state(topic, partition)
        return versioned.state.isr if versioned is not None else None


@pytest.fixture
async def following(session: EtcdSession) -> AsyncIterator[Following]:
    await session.client.put(KEYS.cluster_id, CLUSTER_ID.encode())
    await create_topic(session, "orders", 3)
    view = Following(session)
    await view.start()
    yield view
    await view.stop()


async def test_changes_arrive_as_events_without_a_full_read(
        session: EtcdSession, following: Following) -> None:
    view, client = following.view, session.client
    await until(lambda: view.full_read_count == 2, "the start's read and the poll's first")
    assert set(view.partitions) == {("orders", p) for p in range(3)}

    # An ISR shrink: one partition key, one event, that partition reported.
    put = await client.put(KEYS.partition("orders", 1), PartitionState(1, 0, (1, 2)).encode())
    await until(lambda: following.isr("orders", 1) == (1, 2), "the ISR change in the view")
    assert following.changed[-1] == (set(), {("orders", 1)})
    assert view.revision == put.header.revision
    assert view.state("orders", 1).mod_revision == put.header.revision

    # A partition added (CreatePartitions: the assignment and the new state in one transaction).
    assignment = TopicAssignment({p: (1, 2, 3) for p in range(4)})
    await client.transaction(compare=[], success=[
        client.transactions.put(KEYS.topic("orders"), assignment.encode()),
        client.transactions.put(KEYS.partition("orders", 3), PartitionState(2, 0, (2,)).encode()),
    ], failure=[])
    await until(lambda: ("orders", 3) in view.partitions, "the new partition in the view")
    assert view.topics["orders"].partition_count == 4
    assert following.changed[-1] == ({"orders"}, {("orders", 3)})

    # DeleteTopic: the topic key and its partition keys; every partition leaves with it.
    await client.transaction(compare=[], success=[
        client.transactions.delete(KEYS.topic("orders")),
        client.transactions.delete(KEYS.partition("orders", 0),
                                   range_end=b"/v/partitions/orders0"),
    ], failure=[])
    await until(lambda: "orders" not in view.topics, "the topic gone from the view")
    assert view.partitions == {}
    assert following.changed[-1] == ({"orders"}, {("orders", p) for p in range(4)})
    assert view.full_read_count == 2  # every change above came as an event
    assert view.event_batch_count == 3


async def test_a_broken_stream_is_followed_by_one_full_read(
        session: EtcdSession, following: Following, etcd: EtcdProcess) -> None:
    view, watch = following.view, following.watch
    await until(lambda: view.full_read_count == 2, "the start's read and the poll's first")
    await asyncio.to_thread(etcd.stop)
    await until(lambda: not watch.watching, "the stream broke")
    await asyncio.to_thread(etcd.start)
    await until(lambda: watch.created_count == 2, "the watch created again")
    assert view.full_read_count == 3  # the re-list before the watch was created again
    await session.client.put(KEYS.partition("orders", 2), PartitionState(2, 1, (2,)).encode())
    await until(lambda: following.isr("orders", 2) == (2,), "a change after it, as an event")
    assert view.full_read_count == 3


async def test_a_compacted_resume_revision_is_a_full_read(session: EtcdSession) -> None:
    client = session.client
    await client.put(KEYS.cluster_id, CLUSTER_ID.encode())
    await create_topic(session, "orders", 1)
    following = Following(session)
    view = following.view
    await view.refresh()
    # Changed after the view's read and before its watch exists, then compacted: the first
    # creation resumes after the read (where etcd has no events any more).
    await client.put(KEYS.partition("orders", 0), PartitionState(3, 2, (3,)).encode())
    latest = await client.put(b"/v/elsewhere", b"x")
    await client.compact(latest.header.revision)
    following.watch.start()
    try:
        await until(lambda: following.watch.compacted_count == 1 and following.watch.watching,
                    "compaction seen and the watch created again")
        assert view.full_read_count == 2  # the read above, and the re-list after ErrCompacted
        assert following.isr("orders", 0) == (3,)
        assert view.revision == latest.header.revision
    finally:
        await following.stop()


async def test_deletes_wait_while_etcd_no_longer_holds_the_cluster(
        session: EtcdSession, following: Following) -> None:
    view, client = following.view, session.client
    # A wipe of the prefix as etcdctl del --prefix does it: cluster id first (it sorts first).
    await client.delete_prefix(b"/v/")
    await until(lambda: following.watch.next_revision > view.revision,
                "the deletes reached the watch")
    assert set(view.topics) == {"orders"} and len(view.partitions) == 3  # kept whole
    await view.refresh()  # a full read refuses as well
    assert set(view.topics) == {"orders"}

    # The keys restored (as after etcdctl snapshot restore, or by hand): the next full read
    # applies them, and events are applied again after it.
    await client.put(KEYS.cluster_id, CLUSTER_ID.encode())
    await create_topic(session, "restored", 1)
    await view.refresh()
    assert set(view.topics) == {"restored"} and set(view.partitions) == {("restored", 0)}
    await client.put(KEYS.partition("restored", 0), PartitionState(1, 1, (1,)).encode())
    await until(lambda: following.isr("restored", 0) == (1,), "an event applied again")


async def test_a_large_deletion_arrives_whole(
        session: EtcdSession, following: Following) -> None:
    view = following.view
    # 1,000 partition keys of about 4 KiB each (a long topic name) deleted in one revision:
    # about 4 MiB of events, which etcd splits into fragments (over its 1.5 MiB request limit
    # and the 512 KiB it allows gRPC); the view gets them as one response, applied and
    # notified once.
    big = "b" * 4_000
    await create_topic(session, big, 1_000)
    await until(lambda: sum(1 for k in view.partitions if k[0] == big) == 1_000,
                "the big topic in the view")
    changed_before, batches = len(following.changed), view.event_batch_count
    await session.client.delete_prefix(KEYS.topic_partitions_prefix(big))
    await until(lambda: not any(k[0] == big for k in view.partitions),
                "the big topic's partitions gone")
    assert following.watch.fragment_count >= 1  # etcd did split it
    assert len(following.changed) == changed_before + 1
    assert following.changed[-1] == (set(), {(big, p) for p in range(1_000)})
    assert view.event_batch_count == batches + 1
    assert big in view.topics  # its key is still there


async def test_refresh_reads_only_what_changed_unless_a_key_was_deleted(
        session: EtcdSession, following: Following) -> None:
    view, client = following.view, session.client
    await following.watch.stop()  # only the refreshes below can bring the changes
    await until(lambda: view.full_read_count == 2, "the start's read and the poll's first")
    put = await client.put(KEYS.partition("orders", 2), PartitionState(2, 3, (2, 3)).encode())
    await view.refresh()
    assert following.isr("orders", 2) == (2, 3)
    assert view.revision == put.header.revision
    assert (view.catch_up_count, view.full_read_count) == (1, 2)
    assert following.changed[-1] == (set(), {("orders", 2)})

    await view.refresh()  # nothing changed: nothing to tell
    assert view.catch_up_count == 2 and following.changed[-1] == (set(), {("orders", 2)})

    # A delete cannot show in a read of changes: the key count finds it, and a full read
    # follows in the same refresh.
    await client.delete(KEYS.partition("orders", 0))
    await view.refresh()
    assert view.state("orders", 0) is None
    assert (view.catch_up_count, view.full_read_count) == (2, 3)


async def test_told_another_cluster_id_the_view_reads_everything(
        session: EtcdSession, following: Following) -> None:
    view, client = following.view, session.client
    # etcd now holds another cluster: nothing of it is applied while the view expects the old.
    await client.delete_prefix(b"/v/")
    await client.put(KEYS.cluster_id, b"another-cluster")
    await create_topic(session, "theirs", 1)
    await until(lambda: following.watch.next_revision > view.revision,
                "the changes reached the watch")
    assert set(view.topics) == {"orders"}
    reads = view.full_read_count
    view.expect_cluster_id("another-cluster")  # a full read at once (the poll is an hour)
    await until(lambda: set(view.topics) == {"theirs"}, "the other cluster's topics")
    assert view.full_read_count == reads + 1
    await client.put(KEYS.partition("theirs", 0), PartitionState(2, 1, (2,)).encode())
    await until(lambda: following.isr("theirs", 0) == (2,), "its events applied from then on")


def _etcd_txn_calls(etcd: EtcdProcess) -> int:
    """How many Txn calls etcd has started (its own /metrics, gRPC server counters)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{etcd.client_port}/metrics",
                                timeout=10) as answer:
        text = answer.read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("grpc_server_started_total{")
               and 'grpc_method="Txn"' in line)


async def test_the_views_reads_are_no_transactions(
        session: EtcdSession, following: Following, etcd: EtcdProcess) -> None:
    # etcd 3.5.0-3.5.4 panic when a read-only transaction's call is cancelled during its
    # apply (etcd-io/etcd#14110); a stopping server cancels its calls: the view's reads are
    # plain ranges (an etcd 3.5.1 died under the stray-logs test when one was a transaction).
    view = following.view
    before = _etcd_txn_calls(etcd)
    for _ in range(3):
        await view.refresh()
        await view.full_read(force=True)
    assert _etcd_txn_calls(etcd) == before


async def test_the_acl_refresh_takes_changes_without_a_transaction(
        session: EtcdSession, etcd: EtcdProcess) -> None:
    # The same hazard for the cluster's ACLs (server/cluster/cluster_acls.py), whose refresh
    # compared the key's mod revision in a read-only transaction.
    store = EtcdAclStore(session, KEYS, LONG_INTERVAL_S, watch=False)
    binding = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    before = _etcd_txn_calls(etcd)
    await store.refresh()
    assert store.bindings == () and store.revision == 0  # no key: nothing to take
    await session.client.put(KEYS.acls, encode_acls((binding,)))  # another server's write
    await store.refresh()
    assert store.bindings == (binding,) and store.revision == 1
    await store.refresh()  # unchanged: nothing taken again
    assert store.revision == 1
    await session.client.delete(KEYS.acls)
    await store.refresh()
    assert store.bindings == () and store.revision == 2
    assert _etcd_txn_calls(etcd) == before
