"""The group and offset handlers (server/kafka/apis/groups.py, offsets.py) in-process, on a real
GroupService over a real LogManager and ReplicaManager: every served version of each API
answers a response that kafka-python's classes (generated from Kafka's schemas) encode and
decode back, and FindCoordinator answers COORDINATOR_NOT_AVAILABLE while the group's
``__consumer_offsets`` partition loads.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from stratalog.records import build_batch
from stratalog.server.broker import ReplicaManager
from stratalog.server.client_limits import ClientLimits
from stratalog.server.group_service import GroupService
from stratalog.server.kafka.apis.registry import HANDLERS, SERVED_VERSIONS
from stratalog.server.kafka.codec import RESPONSE_CLASSES
from stratalog.server.kafka.context import ConnectionState, KafkaServices, RequestContext
from stratalog.server.metrics import ServerMetrics
from stratalog.server.security.principal import ANONYMOUS, CallIdentity
from stratalog.server.security.quotas import QuotaConfig, QuotaManager
from stratalog.server.settings import Settings
from stratalog.server.settings_schema import Address
from tests.integration.conftest import until

ADDRESS = Address("127.0.0.1", 9092)


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[KafkaServices]:
    """A topic ``t`` of one partition with ten records, and the group coordinators."""
    from stratalog.server.storage.log_manager import LogManager

    log_manager = LogManager.open([tmp_path / "data"])
    executor = ThreadPoolExecutor(2)
    settings = Settings(offsets_topic_num_partitions=2, group_initial_rebalance_delay_ms=0)
    metrics = ServerMetrics()
    replicas = ReplicaManager(log_manager, settings, metrics, executor)
    log_manager.create_topic("t", 1)
    log_manager.get_log("t", 0).append(build_batch([(1, None, b"v", ())] * 10))
    groups = GroupService(replicas, settings, executor, metrics=metrics)
    try:
        yield KafkaServices(
            replicas, log_manager, groups, None, settings, metrics, executor,  # type: ignore[arg-type]
            ClientLimits(10, 10, 100), QuotaManager(QuotaConfig()), None,
            advertised=lambda: ADDRESS, time_ms=lambda: int(time.time() * 1000))
    finally:
        await groups.close()
        replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()


def _call(services: KafkaServices) -> Callable[[Any, int], Awaitable[Any]]:
    """``call(request, version)``: the handler's response, checked to round-trip through
    kafka-python's response class at that version."""
    connection = ConnectionState("127.0.0.1:5555", "127.0.0.1",
                                 CallIdentity(ANONYMOUS, "127.0.0.1"))

    async def call(request: Any, version: int) -> Any:
        key = request.API_KEY
        low, high = SERVED_VERSIONS[key]
        assert low <= version <= high
        # As the codec hands it over: decoded from the bytes of that version.
        decoded = type(request).decode(request.encode(version=version), version=version)
        ctx = RequestContext(services, connection, key, version, "handler-test")
        response = await HANDLERS[key].handler(ctx, decoded)
        encoded = response.encode(version=version)
        return RESPONSE_CLASSES[key].decode(encoded, version=version)

    return call


_Protocol = JoinGroupRequest.JoinGroupRequestProtocol


def _requests(version: int = 0) -> list[Any]:
    """One request of each API, valid at every version (a JoinGroup of a group of its own
    per ``version``: a second new member of one group would wait for the first to rejoin)."""
    commit_topic = OffsetCommitRequest.OffsetCommitRequestTopic
    delete_topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    return [
        FindCoordinatorRequest(key="g", key_type=0, coordinator_keys=["g"]),
        JoinGroupRequest(group_id=f"join-{version}", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                         member_id="", protocol_type="consumer",
                         protocols=[_Protocol(name="range", metadata=b"m")]),
        SyncGroupRequest(group_id="g", generation_id=1, member_id="m", protocol_type="consumer",
                         protocol_name="range", assignments=[]),
        HeartbeatRequest(group_id="g", generation_id=1, member_id="m"),
        LeaveGroupRequest(group_id="g", member_id="m",
                          members=[LeaveGroupRequest.MemberIdentity(member_id="m")]),
        ListGroupsRequest(states_filter=[]),
        DescribeGroupsRequest(groups=["g", "other"], include_authorized_operations=True),
        DeleteGroupsRequest(groups_names=["nothing-here"]),
        OffsetCommitRequest(group_id="simple", generation_id_or_member_epoch=-1, member_id="",
                            topics=[commit_topic(name="t", partitions=[
                                commit_topic.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=3)])]),
        OffsetFetchRequest(group_id="simple", topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
            name="t", partition_indexes=[0])], groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="simple", topics=None)]),
        OffsetDeleteRequest(group_id="simple", topics=[delete_topic(name="t", partitions=[
            delete_topic.OffsetDeleteRequestPartition(partition_index=0)])]),
    ]


async def test_every_served_version_answers_what_kafkas_schema_reads(services):
    call = _call(services)
    served = {r.API_KEY for r in _requests()}
    assert served == {ApiKey.FindCoordinator, ApiKey.JoinGroup, ApiKey.SyncGroup,
                      ApiKey.Heartbeat, ApiKey.LeaveGroup, ApiKey.ListGroups,
                      ApiKey.DescribeGroups, ApiKey.DeleteGroups, ApiKey.OffsetCommit,
                      ApiKey.OffsetFetch, ApiKey.OffsetDelete}
    answered = []
    for index, request in enumerate(_requests()):
        low, high = SERVED_VERSIONS[request.API_KEY]
        for version in range(low, high + 1):
            request = _requests(version)[index]
            answered.append((request.API_KEY, version, await call(request, version)))
    by_key: dict[int, list[Any]] = {}
    for key, _, response in answered:
        by_key.setdefault(key, []).append(response)
    # A few answers each version must agree on.
    assert {r.error_code if r.API_VERSION < 4 else r.coordinators[0].error_code
            for r in by_key[ApiKey.FindCoordinator]} == {0}
    # v0-v3: admitted at once (0); v4+: MEMBER_ID_REQUIRED (79).
    assert [r.error_code for r in by_key[ApiKey.JoinGroup]] == [0] * 4 + [79] * 6
    assert {p.error_code for r in by_key[ApiKey.OffsetCommit] for t in r.topics
            for p in t.partitions} == {0}
    # Every OffsetFetch version reads the commit (OffsetDelete is asked after them all).
    for response in by_key[ApiKey.OffsetFetch]:
        topics = response.groups[0].topics if response.API_VERSION >= 8 else response.topics
        assert [(t.name, p.partition_index, p.committed_offset) for t in topics
                for p in t.partitions] == [("t", 0, 3)]
    assert [[p.error_code for t in r.topics for p in t.partitions]
            for r in by_key[ApiKey.OffsetDelete]] == [[0]]
    for response in by_key[ApiKey.DescribeGroups]:
        assert [(g.group_id, g.error_code) for g in response.groups] == [
            ("g", 0), ("other", 0)]
    for response in by_key[ApiKey.DeleteGroups]:
        assert [(g.group_id, g.error_code) for g in response.results] == [
            ("nothing-here", 69)]  # GROUP_ID_NOT_FOUND


async def test_find_coordinator_waits_for_the_partition_to_load(services):
    """A server restarted with ``__consumer_offsets`` loads it in the background: until the
    group's partition is loaded, FindCoordinator answers COORDINATOR_NOT_AVAILABLE."""
    call = _call(services)
    groups = services.groups
    assert (await call(FindCoordinatorRequest(key="g"), 0)).error_code == 0  # makes the topic
    await groups.close()
    # A new service over the same logs, as after a restart: start() begins the loads.
    services.groups = restarted = GroupService(services.replicas, services.settings,
                                               services.executor, metrics=services.metrics)
    try:
        await restarted.start()
        assert any(c.core.loading for c in restarted.partitions.values())
        loading = await call(FindCoordinatorRequest(key="g"), 1)
        assert (loading.error_code, loading.node_id) == (15, -1)
        await until(lambda: not any(c.core.loading for c in restarted.partitions.values()),
                    "the partitions loaded", timeout_s=30)
        found = await call(FindCoordinatorRequest(key="g"), 1)
        assert (found.error_code, found.node_id, found.host, found.port) == (
            0, 0, ADDRESS.host, ADDRESS.port)
    finally:
        await restarted.close()
        services.groups = groups

