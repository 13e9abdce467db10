"""server/group_service/: GroupService and its PartitionCoordinators over a real LogManager and
serving layer, in-process: the topic made on first use (not by ListGroups), commits written and
loaded again by the next service (a record that does not decode skipped, named by offset), the
commit checks the core leaves to its caller, and parked requests answered NOT_COORDINATOR at
shutdown."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from stratalog.records import build_batch
from stratalog.records.group_partition import partition_for_group
from stratalog.server.group_service import GROUP_METADATA_TOPIC
from stratalog.server.groups import (
    JoinGroupRequest,
    ListGroupsRequest,
    NotCoordinatorError,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetMetadataTooLargeError,
    PartitionOffset,
)
from stratalog.server.storage.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError

from .conftest import PARTITIONS, WAIT_S, Serving, service_of


async def test_list_groups_does_not_make_the_topic_a_commit_does(serving: Serving) -> None:
    groups = service_of(serving)
    await groups.start()
    assert (await groups.list_groups(ListGroupsRequest())).groups == ()
    assert not serving.replicas.log_manager.has_topic(GROUP_METADATA_TOPIC)
    answer = await groups.commit_offsets(OffsetCommitRequest("g", (PartitionOffset("t", 0, 4),)))
    assert [p.error for p in answer.partitions] == [None]
    assert serving.replicas.log_manager.has_topic(GROUP_METADATA_TOPIC)
    assert len(groups.partitions) == PARTITIONS
    assert serving.metrics.registry.get_sample_value("stratalog_offset_commits_total") == 1
    await groups.close()


async def test_commits_are_loaded_by_the_next_start_past_a_record_that_does_not_decode(
    serving: Serving, caplog: pytest.LogCaptureFixture,
) -> None:
    groups = service_of(serving)
    await groups.start()
    await groups.commit_offsets(OffsetCommitRequest("g", (PartitionOffset("t", 0, 4),)))
    partition = partition_for_group("g", PARTITIONS)
    # Damage: a record of no known type lands between two commits.
    offsets_log = serving.replicas.log_manager.get_log(GROUP_METADATA_TOPIC, partition)
    offsets_log.append(build_batch([(1, b"\x00\x63junk", b"junk", ())]))
    bad_offset = offsets_log.log_end_offset - 1
    await groups.commit_offsets(OffsetCommitRequest("g", (PartitionOffset("t", 0, 9),)))
    await groups.close()

    again = service_of(serving)
    with caplog.at_level(logging.WARNING):
        await again.start()
        coordinator = again.partitions[partition]
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while coordinator.core.loading:
            assert asyncio.get_running_loop().time() < deadline, "never loaded"
            await asyncio.sleep(0.01)
    fetched = await again.fetch_offsets(OffsetFetchRequest("g"))
    assert [(f.topic, f.partition, f.offset) for f in fetched.partitions] == [("t", 0, 9)]
    assert f"skipping the record at offset {bad_offset}" in caplog.text
    assert coordinator.load_seconds is not None
    await again.close()


async def test_the_commit_checks_name_the_partition_and_write_nothing(serving: Serving) -> None:
    groups = service_of(serving)
    await groups.start()
    with pytest.raises(UnknownTopicOrPartitionError, match="t-7"):
        await groups.commit_offsets(OffsetCommitRequest("g", (PartitionOffset("t", 7, 0),)))
    with pytest.raises(OffsetOutOfRangeError, match="offset 11 of t-0: beyond its log end"
                                                    " offset 10"):
        await groups.commit_offsets(OffsetCommitRequest("g", (PartitionOffset("t", 0, 11),)))
    with pytest.raises(OffsetMetadataTooLargeError, match="t-0 is 4097 bytes"):
        await groups.commit_offsets(OffsetCommitRequest(
            "g", (PartitionOffset("t", 0, 1), PartitionOffset("t", 0, 1, metadata="m" * 4097))))
    # Refused before anything was made or written.
    assert not serving.replicas.log_manager.has_topic(GROUP_METADATA_TOPIC)
    await groups.close()


async def test_shutdown_answers_a_parked_join_not_coordinator(serving: Serving) -> None:
    groups = service_of(serving)
    await groups.start()
    join = JoinGroupRequest("g", "consumer", (("range", b""),), 10_000, 60_000,
                            require_known_member_id=False)
    # The first join of an empty group waits group.initial.rebalance.delay.ms (3 s here).
    parked = asyncio.create_task(groups.join_group(join))
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not groups.partitions or not any(
            c.core.groups for c in groups.partitions.values()):
        assert asyncio.get_running_loop().time() < deadline, "the join never reached the group"
        await asyncio.sleep(0.001)
    assert not parked.done()
    groups.begin_shutdown()
    answer = await asyncio.wait_for(parked, WAIT_S)
    assert isinstance(answer.error, NotCoordinatorError)
    await groups.close()


async def test_a_request_cancelled_while_the_topic_is_made_does_not_fail_the_next(
    serving: Serving, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Kafka client that hangs up cancels its FindCoordinator while ``__consumer_offsets`` is
    being created in the executor: the next request finds the topic made, not
    TOPIC_ALREADY_EXISTS."""
    log_manager = serving.replicas.log_manager
    create_topic = log_manager.create_topic
    started, release = threading.Event(), threading.Event()

    def gated_create_topic(*args, **kwargs):
        started.set()
        assert release.wait(WAIT_S), "never released"
        return create_topic(*args, **kwargs)

    monkeypatch.setattr(log_manager, "create_topic", gated_create_topic)
    groups = service_of(serving)
    await groups.start()
    first = asyncio.create_task(groups.find_coordinator("g"))
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, started.wait, WAIT_S), "creation never started"
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(groups.find_coordinator("g"))
    release.set()
    found = await asyncio.wait_for(second, WAIT_S)
    assert found.partition == partition_for_group("g", PARTITIONS)
    assert log_manager.has_topic(GROUP_METADATA_TOPIC)
    await groups.close()
