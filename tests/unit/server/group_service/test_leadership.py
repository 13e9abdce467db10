"""ClusterPartitions, the cluster's LeadershipListener (docs/groups.md, "Cluster mode"), over a
real LogManager and serving layer, in-process: a partition's coordinator is made when this server
begins leading it and loads only once the high watermark reached the log end it took over;
the same epoch again keeps it; when leadership ends its parked requests are answered
NOT_COORDINATOR; a new leadership loads what the old one wrote. The replica roles that call
these hooks are exercised by tests/cluster/test_groups.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from stratalog.server.group_service import (
    GROUP_METADATA_TOPIC,
    ClusterPartitions,
    PartitionCoordinator,
    group_config,
)
from stratalog.server.groups import (
    JoinGroupRequest,
    NotCoordinatorError,
    OffsetCommitRequest,
    OffsetFetchRequest,
    PartitionOffset,
)

from .conftest import WAIT_S, Serving

PARTITION = 1


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (bounded) until ``condition`` holds, yielding to the loop between looks."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.001)


async def call(partitions: dict[int, PartitionCoordinator], method: str, request: Any) -> Any:
    coordinator = partitions[PARTITION]
    return await coordinator.submit(
        lambda token, now: getattr(coordinator.core, method)(request, token, now))


def make_topic(serving: Serving) -> None:
    serving.replicas.log_manager.create_topic(GROUP_METADATA_TOPIC, 2, internal=True)


async def test_a_leader_loads_after_its_high_watermark_and_a_follower_unloads(
        serving: Serving) -> None:
    make_topic(serving)
    partitions: dict[int, PartitionCoordinator] = {}
    leadership = ClusterPartitions(serving.replicas, serving.settings, serving.executor,
                                    group_config(serving.settings), partitions)
    leadership.became_leader("other-topic", PARTITION, 1)  # not ours: nothing
    assert partitions == {}

    leadership.became_leader(GROUP_METADATA_TOPIC, PARTITION, 1)
    first = partitions[PARTITION]
    await until(lambda: first.load_seconds is not None, "the first load")
    commit = OffsetCommitRequest("g", (PartitionOffset("t", 0, 7),))
    assert [p.error for p in (await call(partitions, "commit_offsets", commit)).partitions] == [None]
    leadership.became_leader(GROUP_METADATA_TOPIC, PARTITION, 1)  # the same epoch: kept
    assert partitions[PARTITION] is first

    # A join parks (the initial rebalance delay); leadership ends: NOT_COORDINATOR.
    join = JoinGroupRequest("j", "consumer", (("range", b""),), 10_000, 60_000,
                            require_known_member_id=False)
    parked = asyncio.create_task(call(partitions, "join_group", join))
    await until(lambda: "j" in first.core.groups, "the join reached its group")
    leadership.stopped_leading(GROUP_METADATA_TOPIC, PARTITION)
    assert isinstance((await asyncio.wait_for(parked, WAIT_S)).error, NotCoordinatorError)
    assert PARTITION not in partitions and first.core.closed
    leadership.stopped_leading(GROUP_METADATA_TOPIC, PARTITION)  # again: nothing

    # Leading again, the log as a replicated one: records above the high watermark (copied by
    # no follower yet) hold the load back until the high watermark passes them.
    log = serving.replicas.log_manager.get_log(GROUP_METADATA_TOPIC, PARTITION)
    log.update_high_watermark(0)
    leadership.became_leader(GROUP_METADATA_TOPIC, PARTITION, 2)
    second = partitions[PARTITION]
    assert second is not first
    for _ in range(20):  # the loop turns, the load waits
        await asyncio.sleep(0)
    assert second.load_seconds is None and second.core.loading
    log.maybe_increment_high_watermark(log.log_end_offset)
    serving.replicas.complete_delayed(GROUP_METADATA_TOPIC, PARTITION)
    await until(lambda: second.load_seconds is not None, "the second load")
    fetched = await call(partitions, "fetch_offsets", OffsetFetchRequest("g"))
    assert [(f.topic, f.partition, f.offset) for f in fetched.partitions] == [("t", 0, 7)]
    await leadership.close()
    for coordinator in partitions.values():
        await coordinator.close()
