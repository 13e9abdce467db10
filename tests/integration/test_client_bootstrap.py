"""Bootstrap targets, the metadata cache and acks against a real single server.

A single server is node 0 and leads all its partitions (server/metadata.py): the client
routes to it, and the tests read the server's own /metrics to see which RPCs it was sent (a
single target must cost no Metadata call). The three-server cases are
tests/cluster/test_client_routing.py's.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from stratalog.client import Client, Consumer, Producer, SyncClient
from stratalog.client.wire import FetchFormat
from stratalog.records import iter_batch_headers

from .conftest import ServerProcess

SERVICE = "stratalog.v1.Broker"
CLI = [sys.executable, "-m", "stratalog.cli"]


def started(method: str, grpc_type: str = "unary") -> str:
    return (f'grpc_server_started_total{{grpc_method="{method}",grpc_service="{SERVICE}",'
            f'grpc_type="{grpc_type}"}}')


def metadata_calls(server: ServerProcess) -> float:
    return server.metric(started("Metadata"))


@pytest.fixture(scope="module")
def dead_target() -> str:
    """An address where nothing listens (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


async def test_one_target_asks_for_no_metadata(server: ServerProcess) -> None:
    before = metadata_calls(server)
    async with Client(server.target) as client:
        await client.create_topic("boot-single", partitions=2)
        for partition in (0, 1):
            await client.produce("boot-single", partition, [b"x"])
            await client.fetch_by_offset("boot-single", partition, 0)
        assert client.metadata_cache.updates == 0
    assert metadata_calls(server) == before


async def test_an_unknown_topic_costs_a_single_server_one_metadata_call(
    server: ServerProcess,
) -> None:
    """On the UNKNOWN_TOPIC_OR_PARTITION error path only, the client asks once whether it
    talks to a cluster (where a server's view may lag a new topic): a single server is not."""
    from stratalog.client import UnknownTopicOrPartitionError

    before = metadata_calls(server)
    async with Client(server.target) as client:
        with pytest.raises(UnknownTopicOrPartitionError):
            await client.produce("boot-no-such-topic", 0, [b"x"])
        with pytest.raises(UnknownTopicOrPartitionError):
            await client.describe_topic("boot-no-such-topic")
    assert metadata_calls(server) == before + 2  # one per failed request, none otherwise


async def test_several_targets_with_the_first_dead(
    server: ServerProcess, dead_target: str
) -> None:
    before = metadata_calls(server)
    async with Client([dead_target, server.target]) as client:
        await client.create_topic("boot-dead-first", partitions=2)  # the dead one, then ours
        for partition in (0, 1):
            result = await client.produce("boot-dead-first", partition, [b"a", b"b"])
            assert result.base_offset == 0
        cache = client.metadata_cache
        # One Metadata answer for the topic: node 0 leads both partitions, reached where it
        # answered (not at the address it advertises, whatever that is).
        assert cache.updates == 1 and cache.reachable == {0: server.target}
        assert [cache.route("boot-dead-first", p).address for p in (0, 1)] == [server.target] * 2
        fetched = await client.fetch_by_offset("boot-dead-first", 1, 0)
        assert [r.value for r in fetched.records] == [b"a", b"b"]
        assert cache.updates == 1  # cached: no second Metadata call
    assert metadata_calls(server) == before + 1


def test_the_sync_client_takes_the_list_too(server: ServerProcess, dead_target: str) -> None:
    with SyncClient(f"{dead_target},{server.target}") as client:
        client.create_topic("boot-sync", partitions=1)
        client.produce("boot-sync", 0, [b"s"])
        result = client.fetch_by_offset("boot-sync", 0, 0)
        assert [r.value for r in result.records] == [b"s"]
        assert client.metadata_cache.reachable == {0: server.target}


async def test_producer_and_consumer_with_the_first_target_dead(
    server: ServerProcess, dead_target: str
) -> None:
    targets = f"{dead_target},{server.target}"
    async with Client(server.target) as admin:
        await admin.create_topic("boot-pc", partitions=3)
    async with Producer(targets, linger_ms=0) as producer:
        futures = await producer.send_many("boot-pc", [b"%d" % i for i in range(30)])
        await futures
    async with Consumer(targets, "boot-pc", start="earliest") as consumer:
        values = sorted([int(r.value) async for r in consumer])
    assert values == list(range(30))


async def test_acks_below_all_turn_idempotence_off_as_the_batches_show(
    server: ServerProcess,
) -> None:
    """acks reaches the server on every request (a single server answers each after its
    append); the Producer's acks=1 default is Kafka's: no idempotence, so its batches carry
    no producer id, while acks='all' batches do."""
    async with Client(server.target) as client:
        await client.create_topic("boot-acks", partitions=1)
        for acks in ("all", 1, 0, -1):
            await client.produce("boot-acks", 0, [b"raw-%s" % str(acks).encode()], acks=acks)
        async with Producer(client, acks=1, linger_ms=0) as leader_only:
            await (await leader_only.send("boot-acks", b"acks-1", partition=0))
        async with Producer(client, linger_ms=0) as every_replica:
            await (await every_replica.send("boot-acks", b"acks-all", partition=0))
        fetched = await client.fetch_by_offset(
            "boot-acks", 0, 0, fetch_format=FetchFormat.RECORD_BATCHES
        )
    headers = list(iter_batch_headers(fetched.record_batches))
    assert len(headers) == 6
    assert [h.producer_id >= 0 for h in headers[4:]] == [False, True]
    with pytest.raises(ValueError, match="acks"):
        Producer(server.target, acks=2)
    with pytest.raises(ValueError, match="idempotence needs acks='all'"):
        Producer(server.target, acks=1, idempotent=True)


def _cli(*args: str, target: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    return subprocess.run([*CLI, *args, "--target", target], input=stdin, capture_output=True,
                          timeout=120, env=env)


def test_cli_takes_a_list_with_the_first_dead(server: ServerProcess, dead_target: str) -> None:
    targets = f"{dead_target},{server.target}"
    created = _cli("topics", "create", "boot-cli", target=targets)
    assert created.returncode == 0, created.stderr
    produced = _cli("produce", "boot-cli", "--acks", "1", target=targets, stdin=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _cli("consume", "boot-cli", target=targets)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.decode().split() == ["one", "two"]


@pytest.mark.parametrize("bad", ["127.0.0.1:1,,127.0.0.1:2", "127.0.0.1:1,", "a,http://b"])
def test_cli_exits_2_on_a_bad_list(server: ServerProcess, bad: str) -> None:
    result = _cli("topics", "list", target=bad)
    assert result.returncode == 2
    assert "--target" in result.stderr.decode()
