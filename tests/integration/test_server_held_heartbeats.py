"""Held heartbeats against a real server process (docs/groups.md "Held heartbeats"): a Heartbeat
with ``max_wait_ms`` is held by the coordinator (a waiting RPC, kind ``held_heartbeat`` of the
gauge ``stratalog_waiting_rpcs``) and answered as soon as its group starts a rebalance or its
member is removed; the group Consumer (held heartbeats by default) rebalances when a fourth
member joins three without waiting for a heartbeat interval.

What fails if the feature is broken is an answer, not a time: a heartbeat not held is answered OK
at once (the gauge never counts it; the call's outcome is OK, not REBALANCE_IN_PROGRESS); one
held but not answered at the rebalance is answered OK when its 30 s wait ends. The Consumers run
with a 60 s heartbeat interval, so a rebalance learnt of only at the next heartbeat would not end
within the bound of a wait (30 s) that a working one meets in well under a second. Every wait is
on a condition, never a sleep.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pytest

from stratalog.client import Client, Consumer, Producer
from stratalog.client.types import TopicPartition
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, ServerProcess, launch_server, until, wait_until
from .test_server_groups import Refused, first_join, join_and_sync, join_request

GROUP_FLAGS = (
    "--group-initial-rebalance-delay-ms", "0",
    "--group-min-session-timeout-ms", "100",
    "--offsets-topic-num-partitions", "3",
)
T = CALL_TIMEOUT_S
#: Session of the raw members: their held heartbeats may wait up to half of it (30 s).
SESSION_MS = 60_000
HELD_MS = 30_000
#: The Consumers' heartbeat interval: far longer than any wait of a test (see module docstring).
INTERVAL_MS = 60_000
BOUND_S = 30.0
PARTITIONS = 6


@pytest.fixture(scope="module")
def held_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = launch_server(tmp_path_factory.mktemp("held") / "data", *GROUP_FLAGS)
    yield process
    assert process.stop(signal.SIGTERM) == 0, process.log_text()[-4000:]


@pytest.fixture(scope="module")
def stub(held_server: ServerProcess) -> Iterator[broker_pb2_grpc.BrokerStub]:
    with grpc.insecure_channel(held_server.target) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


def hold(stub: broker_pb2_grpc.BrokerStub, group: str, member_id: str, generation: int
         ) -> Future[Any]:
    return stub.Heartbeat.future(pb.HeartbeatRequest(
        group_id=group, member_id=member_id, generation_id=generation, max_wait_ms=HELD_MS,
    ), timeout=T + HELD_MS / 1000)


def outcome(call: Future[Any]) -> str:
    """"OK", or the refusal's ErrorInfo reason."""
    try:
        call.result()
    except grpc.RpcError as error:
        return Refused(error).reason or str(error)
    return "OK"


def test_held_heartbeat_is_answered_when_a_second_member_joins(stub, held_server) -> None:
    first, generation = join_and_sync(stub, "pair", session_ms=SESSION_MS)
    held = hold(stub, "pair", first, generation)
    wait_until(lambda: held_server.waiting_rpcs("held_heartbeat") == 1,
               "the heartbeat to be held")
    assert not held.done()
    second = first_join(stub, "pair", session_ms=SESSION_MS)
    parked = stub.JoinGroup.future(join_request("pair", second, session_ms=SESSION_MS),
                                   timeout=T)
    # Answered as the rebalance starts, not OK when its wait ends.
    assert outcome(held) == "REBALANCE_IN_PROGRESS"
    rejoined = stub.JoinGroup(join_request("pair", first, session_ms=SESSION_MS), timeout=T)
    assert parked.result(timeout=T).generation_id == rejoined.generation_id == generation + 1
    wait_until(lambda: held_server.waiting_rpcs("held_heartbeat") == 0, "the slot released")


def test_held_heartbeat_of_a_removed_member_gets_its_error(stub, held_server) -> None:
    member, generation = join_and_sync(stub, "removed", session_ms=SESSION_MS)
    held = hold(stub, "removed", member, generation)
    wait_until(lambda: held_server.waiting_rpcs("held_heartbeat") == 1,
               "the heartbeat to be held")
    stub.LeaveGroup(pb.LeaveGroupRequest(group_id="removed", members=[
        pb.LeavingMember(member_id=member)]), timeout=T)
    assert outcome(held) == "UNKNOWN_MEMBER_ID"
    wait_until(lambda: held_server.waiting_rpcs("held_heartbeat") == 0, "the slot released")


def test_a_negative_wait_is_refused(stub) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.Heartbeat(pb.HeartbeatRequest(group_id="g", member_id="m", generation_id=1,
                                           max_wait_ms=-1), timeout=T)
    refusal = Refused(caught.value)
    assert refusal.code == grpc.StatusCode.INVALID_ARGUMENT and "max_wait_ms" in refusal.message


class Reader:
    """One group consumer reading in a task: the last offset it got per partition, its
    revocations."""

    def __init__(self, client: Client, topic: str, group: str) -> None:
        self.got: dict[TopicPartition, int] = {}
        self.revoked: list[frozenset[TopicPartition]] = []
        self.consumer = Consumer(
            client, topics=[topic], group_id=group, auto_offset_reset="earliest",
            session_timeout_ms=3 * INTERVAL_MS, heartbeat_interval_ms=INTERVAL_MS,
            on_partitions_revoked=self.revoked.append)
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for record in self.consumer:
            self.got[TopicPartition(record.topic, record.partition)] = record.offset

    def consuming(self, count: int, offset: int) -> bool:
        """Owns ``count`` partitions and has read each up to ``offset``."""
        if self.task.done():
            self.task.result()  # raises what ended the reader
            raise AssertionError("the reader ended")
        owned = self.consumer.assignment()
        return len(owned) == count and all(self.got.get(tp, -1) >= offset for tp in owned)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.close()


async def test_a_fourth_consumer_joins_three_without_waiting_for_a_heartbeat_interval(
    held_server: ServerProcess,
) -> None:
    async with Client(held_server.target) as client:
        await client.create_topic("held", PARTITIONS)
        readers: list[Reader] = []

        async def produce_one_each() -> None:
            async with Producer(client) as producer:
                for p in range(PARTITIONS):
                    await producer.send_many("held", [b"%d" % p], partition=p)

        await produce_one_each()
        try:
            # Forming the group is itself three rebalances, each needing the members already
            # in it to learn of it: with a 60 s interval, only held heartbeats tell them.
            for _ in range(3):
                readers.append(Reader(client, "held", "g-held"))
            await until(lambda: all(r.consuming(2, 0) for r in readers), "three stable",
                        BOUND_S)
            await until(lambda: held_server.waiting_rpcs("held_heartbeat") == 3,
                        "each member to hold a heartbeat", BOUND_S)
            revoked_before = [len(r.revoked) for r in readers]
            readers.append(Reader(client, "held", "g-held"))
            await until(lambda: sorted(len(r.consumer.assignment()) for r in readers)
                        == [1, 1, 2, 2], "four members, the fourth with one partition", BOUND_S)
            await produce_one_each()  # offset 1 of each: every member reads again
            await until(lambda: all(r.consuming(len(r.consumer.assignment()), 1)
                                    for r in readers), "four members consuming", BOUND_S)
            owners = [tp for r in readers for tp in r.consumer.assignment()]
            assert len(owners) == len(set(owners)) == PARTITIONS
            # Cooperative: the old members gave up exactly what the fourth took.
            new_revoked = [tp for r, before in zip(readers[:3], revoked_before, strict=True)
                           for batch in r.revoked[before:] for tp in batch]
            assert len(new_revoked) == 1
            assert set(new_revoked) == readers[3].consumer.assignment()
            # And every member holds a heartbeat again, in the new generation.
            await until(lambda: held_server.waiting_rpcs("held_heartbeat") == 4,
                        "each member to hold a heartbeat", BOUND_S)
        finally:
            for reader in readers:
                await reader.close()
