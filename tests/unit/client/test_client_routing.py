"""The clients' routing against in-process brokers that play a cluster's members.

Each ``Member`` is a real grpc.aio server on 127.0.0.1:0 (not the stratalog server: a real
cluster is tests/cluster/test_client_routing.py's) that leads the partitions the shared
``Leaders`` table gives it and refuses the others with the real server's
NotLeaderOrFollowerError status (server/rpc/status.py), with or without the leader hint, and answers
Metadata from the same table. The tests count what each member was asked.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from stratalog.client import Client, Consumer, Producer, SyncClient, errors
from stratalog.client.client import CONNECT_TIMEOUT_MS, RECONNECT_BACKOFF_MAX_MS
from stratalog.client.wire import FetchFormat
from stratalog.server.cluster import errors as cluster_errors
from stratalog.server.rpc import status
from stratalog.server.storage import errors as storage_errors
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc


@dataclasses.dataclass
class Leaders:
    """The cluster's truth: partition -> (leader node id, epoch); node id -> address."""

    partitions: dict[tuple[str, int], tuple[int, int]]
    addresses: dict[int, str] = dataclasses.field(default_factory=dict)
    hints: bool = True  # refusals name the leader
    lagging: int = 0  # Produce calls a leader answers UNKNOWN_TOPIC_OR_PARTITION first


class Member(broker_pb2_grpc.BrokerServicer):
    def __init__(self, node_id: int, leaders: Leaders) -> None:
        self.node_id = node_id
        self.leaders = leaders
        self.calls: collections.Counter[str] = collections.Counter()
        self.logs: dict[tuple[str, int], list[bytes]] = collections.defaultdict(list)
        self.unknown_topics: set[str] = set()  # topics its view does not have yet

    async def _check_leader(self, topic: str, partition: int, context) -> None:
        leader, epoch = self.leaders.partitions[(topic, partition)]
        if leader != self.node_id:
            hint = (leader, epoch, self.leaders.addresses[leader]) if self.leaders.hints else ()
            error = cluster_errors.NotLeaderOrFollowerError(topic, partition, *hint)
            await context.abort_with_status(status.to_status(error))

    async def Session(self, request_iterator, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    async def Produce(self, request, context):
        self.calls["Produce"] += 1
        if (request.topic, request.partition) not in self.leaders.partitions:
            await context.abort_with_status(status.to_status(
                storage_errors.UnknownTopicOrPartitionError(f"unknown topic {request.topic!r}")))
        await self._check_leader(request.topic, request.partition, context)
        if self.leaders.lagging:
            # Its view of the cluster has not caught up with the new topic yet.
            self.leaders.lagging -= 1
            await context.abort_with_status(status.to_status(
                storage_errors.UnknownTopicOrPartitionError(f"unknown topic {request.topic!r}")))
        log = self.logs[(request.topic, request.partition)]
        log.append(bytes(request.record_batches) or request.records[0].value)
        self.calls[f"acks={request.acks}"] += 1
        return pb.ProduceResponse(base_offset=len(log) - 1, last_offset=len(log) - 1,
                                  log_append_time=-1, record_count=1)

    async def FetchByOffset(self, request, context):
        self.calls["FetchByOffset"] += 1
        await self._check_leader(request.topic, request.partition, context)
        log = self.logs[(request.topic, request.partition)]
        return pb.FetchResponse(topic=request.topic, partition=request.partition,
                                high_watermark=len(log), next_offset=request.offset)

    async def ListOffsets(self, request, context):
        self.calls["ListOffsets"] += 1
        await self._check_leader(request.topic, request.partition, context)
        log = self.logs[(request.topic, request.partition)]
        offset = 0 if request.timestamp == -2 else len(log)
        return pb.ListOffsetsResponse(offset=offset, timestamp=-1)

    async def DescribeTopic(self, request, context):
        self.calls["DescribeTopic"] += 1
        count = sum(1 for topic, _ in self.leaders.partitions if topic == request.name)
        if not count or request.name in self.unknown_topics:
            await context.abort_with_status(status.to_status(
                storage_errors.UnknownTopicOrPartitionError(f"unknown topic {request.name!r}")))
        return pb.DescribeTopicResponse(topic=pb.TopicDescription(
            name=request.name,
            partitions=[pb.PartitionDescription(partition=p, max_timestamp=-1)
                        for p in range(count)],
        ))

    async def InitProducerId(self, request, context):
        self.calls["InitProducerId"] += 1
        return pb.InitProducerIdResponse(producer_id=7)

    async def Metadata(self, request, context):
        self.calls["Metadata"] += 1
        response = pb.MetadataResponse(
            node_id=self.node_id, controller_id=1, controller_epoch=1,
            brokers=[pb.BrokerMetadata(node_id=n, address=a)
                     for n, a in sorted(self.leaders.addresses.items())],
        )
        topics: dict[str, list[int]] = collections.defaultdict(list)
        for topic, partition in sorted(self.leaders.partitions):
            topics[topic].append(partition)
        for topic, partitions in topics.items():
            if request.topics and topic not in request.topics:
                continue
            entry = response.topics.add(name=topic)
            for partition in partitions:
                leader, epoch = self.leaders.partitions[(topic, partition)]
                entry.partitions.add(partition=partition, leader=leader, leader_epoch=epoch,
                                     replicas=[1, 2, 3], isr=[1, 2, 3])
        return response


@dataclasses.dataclass
class Cluster:
    leaders: Leaders
    members: dict[int, Member]
    servers: dict[int, grpc.aio.Server]

    def address(self, node_id: int) -> str:
        return self.leaders.addresses[node_id]

    async def stop(self, node_id: int) -> None:
        await self.servers.pop(node_id).stop(None)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    leaders = Leaders({("t", 0): (2, 1), ("t", 1): (3, 1)})
    members, servers = {}, {}
    for node_id in (1, 2, 3):
        member = Member(node_id, leaders)
        server = grpc.aio.server()
        broker_pb2_grpc.add_BrokerServicer_to_server(member, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        leaders.addresses[node_id] = f"127.0.0.1:{port}"
        members[node_id], servers[node_id] = member, server
    state = Cluster(leaders, members, servers)
    try:
        yield state
    finally:
        for server in state.servers.values():
            await server.stop(None)


async def test_one_target_follows_the_hint_without_metadata(cluster: Cluster) -> None:
    async with Client(cluster.address(1)) as client:
        result = await client.produce("t", 0, [b"a"], acks=1)
        assert result.base_offset == 0
    assert cluster.members[1].calls["Produce"] == 1  # refused, with the hint
    assert cluster.members[2].calls["Produce"] == 1
    assert cluster.members[2].calls["acks=1"] == 1
    assert sum(m.calls["Metadata"] for m in cluster.members.values()) == 0


async def test_without_hints_the_client_asks_for_metadata(cluster: Cluster) -> None:
    cluster.leaders.hints = False
    async with Client(cluster.address(1)) as client:
        await client.produce("t", 1, [b"a"])
        await client.produce("t", 1, [b"b"])  # the cache now knows: straight to node 3
    assert cluster.members[1].calls["Metadata"] == 1
    assert cluster.members[1].calls["Produce"] == 1
    assert cluster.members[3].calls["Produce"] == 2
    assert cluster.members[3].logs[("t", 1)] == [b"a", b"b"]


async def test_a_single_server_that_leads_costs_no_metadata(cluster: Cluster) -> None:
    async with Client(cluster.address(2)) as client:
        for value in (b"a", b"b", b"c"):
            await client.produce("t", 0, [value])
        await client.fetch_by_offset("t", 0, 0)
    assert cluster.members[2].calls["Metadata"] == 0
    assert cluster.members[2].calls["Produce"] == 3


async def test_several_targets_with_the_first_dead(cluster: Cluster) -> None:
    dead = cluster.address(1)
    await cluster.stop(1)
    async with Client([dead, cluster.address(3)]) as client:
        await client.produce("t", 0, [b"x"])
        assert (await client.describe_topic("t")).name == "t"
    # Metadata from node 3 (node 1 refused the connection) named node 2 as the leader.
    assert cluster.members[3].calls["Metadata"] == 1
    assert cluster.members[2].logs[("t", 0)] == [b"x"]
    assert cluster.members[3].calls["DescribeTopic"] == 1


async def test_after_a_leader_change_the_client_follows(cluster: Cluster) -> None:
    async with Client([cluster.address(1), cluster.address(2)]) as client:
        await client.produce("t", 0, [b"before"])
        cluster.leaders.partitions[("t", 0)] = (3, 2)  # an election: node 3 leads, epoch 2
        await client.produce("t", 0, [b"after"])
        await client.fetch_by_offset("t", 0, 0)
    assert cluster.members[2].logs[("t", 0)] == [b"before"]
    assert cluster.members[3].logs[("t", 0)] == [b"after"]
    assert cluster.members[3].calls["FetchByOffset"] == 1


async def test_a_read_from_a_gone_leader_is_sent_to_the_new_one(cluster: Cluster) -> None:
    async with Client([cluster.address(1), cluster.address(3)], retry_backoff_ms=10) as client:
        await client.fetch_by_offset("t", 0, 0)
        await cluster.stop(2)
        cluster.leaders.partitions[("t", 0)] = (3, 2)
        await client.fetch_by_offset("t", 0, 0)  # node 2 gone: refresh, node 3
    assert cluster.members[3].calls["FetchByOffset"] == 1


async def _until_disconnected(client: Client, address: str) -> None:
    """Wait until the client's channel to ``address`` has noticed that its server went (it is
    no longer READY). A request written on the connection while the server closes it ends
    "Stream removed (sendmsg: Broken pipe)", and may have been read: a Produce that ended so is
    raised, rightly (tests/unit/client/test_routing.py), and the tests that wait here are about
    a request that finds no connection."""
    channel = client._connections[address].channel
    await _until(lambda: channel.get_state() is not grpc.ChannelConnectivity.READY,
                 f"the channel to {address} left READY")


async def test_a_produce_to_a_gone_leader_goes_to_the_new_one(cluster: Cluster) -> None:
    """The gone leader's connection is not ready: nothing is sent to it, so the produce goes
    to the leader a refresh names within the same call. (A produce whose answer was lost
    after it was sent is raised instead: tests/unit/client/test_routing.py.)"""
    async with Client([cluster.address(1), cluster.address(3)], retry_backoff_ms=10) as client:
        await client.produce("t", 0, [b"a"])
        await cluster.stop(2)
        await _until_disconnected(client, cluster.address(2))
        cluster.leaders.partitions[("t", 0)] = (3, 2)
        await client.produce("t", 0, [b"b"])
    assert cluster.members[3].logs[("t", 0)] == [b"b"]


async def test_no_leader_until_the_deadline_raises_leader_not_available(cluster: Cluster) -> None:
    cluster.leaders.partitions[("t", 0)] = (-1, 2)
    cluster.leaders.hints = False
    async with Client([cluster.address(1), cluster.address(3)], retry_backoff_ms=10) as client:
        with pytest.raises(errors.LeaderNotAvailableError):
            await client.fetch_by_offset("t", 0, 0, timeout_s=0.3)


async def test_the_producer_and_consumer_route_by_the_list(cluster: Cluster) -> None:
    targets = f"{cluster.address(1)},{cluster.address(3)}"
    async with Producer(targets, linger_ms=0) as producer:
        futures = [await producer.send("t", b"v", partition=p) for p in (0, 1)]
        await asyncio.gather(*futures)
    assert cluster.members[2].calls["acks=-1"] >= 1 and cluster.members[3].calls["acks=-1"] >= 1
    assert len(cluster.members[2].logs[("t", 0)]) == 1
    assert len(cluster.members[3].logs[("t", 1)]) == 1
    async with Consumer(targets, "t", partitions=[0], start="latest") as consumer:
        assert [r async for r in consumer] == []  # nothing past the end
    assert cluster.members[2].calls["ListOffsets"] >= 1
    assert cluster.members[1].calls["ListOffsets"] == 0


async def test_the_sync_client_routes_the_same_way(cluster: Cluster) -> None:
    cluster.leaders.hints = False

    def use() -> None:  # in a thread: the members serve on this test's event loop
        with SyncClient(cluster.address(1)) as client:
            client.produce("t", 1, [b"a"])
            client.fetch_by_offset("t", 1, 0, fetch_format=FetchFormat.RECORD_BATCHES)

    await asyncio.to_thread(use)
    assert cluster.members[1].calls["Metadata"] == 1
    assert cluster.members[3].logs[("t", 1)] == [b"a"]
    assert cluster.members[3].calls["FetchByOffset"] == 1


async def test_a_lagging_leader_answering_unknown_topic_is_asked_again(cluster: Cluster) -> None:
    cluster.leaders.lagging = 2
    async with Client([cluster.address(1), cluster.address(2)], retry_backoff_ms=10) as client:
        await client.produce("t", 0, [b"late"])
    assert cluster.members[2].calls["Produce"] == 3
    assert cluster.members[2].logs[("t", 0)] == [b"late"]


async def test_an_unknown_topic_is_raised_after_checking_the_clusters_metadata(
    cluster: Cluster,
) -> None:
    async with Client(cluster.address(2)) as client:
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await client.produce("nope", 0, [b"x"])
    assert cluster.members[2].calls["Produce"] == 1
    # One Metadata call says it is a cluster, one asks for the topic: nobody has it.
    assert cluster.members[2].calls["Metadata"] == 2


async def test_the_sync_client_asks_a_lagging_leader_again(cluster: Cluster) -> None:
    cluster.leaders.lagging = 1

    def use() -> None:
        with SyncClient([cluster.address(1), cluster.address(2)], retry_backoff_ms=10) as client:
            client.produce("t", 0, [b"late"])

    await asyncio.to_thread(use)
    assert cluster.members[2].logs[("t", 0)] == [b"late"]


async def test_one_target_after_a_hint_follows_a_failover(cluster: Cluster) -> None:
    """A client that learnt the leader from a hint alone (one target, no Metadata call yet)
    knows it is in a cluster: when that leader goes, it asks for metadata."""
    async with Client(cluster.address(1), retry_backoff_ms=10) as client:
        await client.produce("t", 0, [b"a"])  # node 1 refuses, names node 2
        await cluster.stop(2)
        await _until_disconnected(client, cluster.address(2))
        cluster.leaders.partitions[("t", 0)] = (3, 2)
        await client.produce("t", 0, [b"b"])
    assert cluster.members[3].logs[("t", 0)] == [b"b"]
    assert cluster.members[1].calls["Metadata"] >= 1


async def test_a_leader_that_never_answers_is_left_after_the_connect_timeout(
    cluster: Cluster,
) -> None:
    """A leader killed in a container network (or frozen) does not refuse connections: they
    go unanswered. The connection attempt fails after CONNECT_TIMEOUT_MS (not gRPC's 20 s),
    and the read goes to the leader a refresh names, within its deadline."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # accepts TCP, never speaks HTTP/2
        cluster.leaders.addresses[4] = f"127.0.0.1:{silent.getsockname()[1]}"
        cluster.leaders.partitions[("t", 0)] = (4, 1)
        async with Client([cluster.address(1), cluster.address(3)], timeout_s=25) as client:
            read = asyncio.create_task(client.fetch_by_offset("t", 0, 0))
            await asyncio.sleep(0.2)
            cluster.leaders.partitions[("t", 0)] = (3, 2)  # the election
            await read
    assert cluster.members[3].calls["FetchByOffset"] == 1


async def test_a_produce_that_found_no_connection_goes_to_the_new_leader(
    cluster: Cluster,
) -> None:
    """A produce whose leader never accepted the connection was not sent: unlike one whose
    answer was lost, it goes to the new leader within the same call."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        cluster.leaders.addresses[4] = f"127.0.0.1:{silent.getsockname()[1]}"
        cluster.leaders.partitions[("t", 0)] = (4, 1)
        async with Client([cluster.address(1), cluster.address(3)], timeout_s=25) as client:
            sent = asyncio.create_task(client.produce("t", 0, [b"p"]))
            await asyncio.sleep(0.2)
            cluster.leaders.partitions[("t", 0)] = (3, 2)
            await sent
    assert cluster.members[3].logs[("t", 0)] == [b"p"]


async def _until(condition, what: str, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.01)


async def test_a_refused_leader_is_left_at_once_not_after_the_connect_timeout(
    cluster: Cluster,
) -> None:
    """A leader killed on a live host refuses connections. While Metadata still names it (the
    election pending), each attempt fails at once and the client asks again after
    ``retry_backoff_ms``, instead of waiting CONNECT_TIMEOUT_MS on a connection that will not
    come; the read reaches the new leader as soon as a refresh names it. (Before issue 24
    the attempt under way at the election waited out the whole connect timeout.)"""
    async with Client([cluster.address(1), cluster.address(3)], retry_backoff_ms=10) as client:
        await client.fetch_by_offset("t", 0, 0)
        gone = cluster.address(2)
        await cluster.stop(2)  # Metadata still names node 2
        loop = asyncio.get_running_loop()
        started = loop.time()
        read = asyncio.create_task(client.fetch_by_offset("t", 0, 0))
        await _until(lambda: client.metadata_cache.is_unreachable(gone), "node 2 refused")
        cluster.leaders.partitions[("t", 0)] = (3, 2)  # the election
        await read
        assert loop.time() - started < CONNECT_TIMEOUT_MS / 1000
        # Node 2 is asked for metadata last until it answers again.
        assert client.metadata_cache.candidates(client.targets, gone)[-1] == gone
    assert cluster.members[3].calls["FetchByOffset"] == 1


async def test_the_sync_client_leaves_a_refused_leader_at_once(cluster: Cluster) -> None:
    """The same with the SyncClient, for a read (its Produce to a leader that died while the
    request was on its way is raised, as a request whose answer was lost: the caller
    resends)."""
    gone = cluster.address(2)
    client = SyncClient([cluster.address(1), cluster.address(3)], retry_backoff_ms=10)
    try:
        await asyncio.to_thread(client.fetch_by_offset, "t", 0, 0)
        await cluster.stop(2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        read = asyncio.ensure_future(asyncio.to_thread(client.fetch_by_offset, "t", 0, 0))
        await _until(lambda: client.metadata_cache.is_unreachable(gone), "node 2 refused")
        cluster.leaders.partitions[("t", 0)] = (3, 2)
        await read
        assert loop.time() - started < CONNECT_TIMEOUT_MS / 1000
    finally:
        await asyncio.to_thread(client.close)
    assert cluster.members[3].calls["FetchByOffset"] == 1


async def test_a_dead_bootstrap_target_is_asked_last_from_then_on(cluster: Cluster) -> None:
    dead = cluster.address(1)
    await cluster.stop(1)
    async with Client([dead, cluster.address(3)]) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert (await client.describe_topic("t")).name == "t"
        assert loop.time() - started < CONNECT_TIMEOUT_MS / 1000  # refused: not waited on
        assert client.metadata_cache.is_unreachable(dead)
        assert client.metadata_cache.candidates(client.targets)[-1] == dead
        await client.produce("t", 0, [b"x"])
    assert cluster.members[2].logs[("t", 0)] == [b"x"]


async def test_a_leader_restarted_on_its_address_is_reached_again_promptly(
    cluster: Cluster,
) -> None:
    """A refused connection fails the attempt at once, and gRPC backs off before the next
    one (at most RECONNECT_BACKOFF_MAX_MS): a leader that comes back on its address is
    reached again within about that, not given up on, and the read waiting meanwhile (the
    cache still naming it) succeeds within its deadline."""
    async with Client([cluster.address(1), cluster.address(3)], retry_backoff_ms=10) as client:
        await client.fetch_by_offset("t", 0, 0)
        address = cluster.address(2)
        await cluster.stop(2)
        read = asyncio.create_task(client.fetch_by_offset("t", 0, 0, timeout_s=20))
        await _until(lambda: client.metadata_cache.is_unreachable(address), "node 2 refused")
        loop = asyncio.get_running_loop()
        restarted_at = loop.time()
        server = grpc.aio.server()
        broker_pb2_grpc.add_BrokerServicer_to_server(cluster.members[2], server)
        assert server.add_insecure_port(address) == int(address.rsplit(":", 1)[1])
        await server.start()
        cluster.servers[2] = server
        await read
        assert loop.time() - restarted_at < RECONNECT_BACKOFF_MAX_MS / 1000 + 2
        assert not client.metadata_cache.is_unreachable(address)
    assert cluster.members[2].calls["FetchByOffset"] == 2
