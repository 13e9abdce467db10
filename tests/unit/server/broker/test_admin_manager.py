"""AdminManager on a real LogManager in a temporary directory: the topic administration rules
both front ends call (creation defaults and bounds, validate_only, internal topics, the three
forms of config alteration, DescribeConfigs' sources, Metadata with auto-creation)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stratalog.server.broker import AdminManager, ConfigOp, ReplicaManager
from stratalog.server.broker.config_descriptions import ConfigSource, ConfigType
from stratalog.server.cluster.errors import InvalidReplicationFactorError
from stratalog.server.metrics import ServerMetrics
from stratalog.server.security.acl_store import AclStore
from stratalog.server.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from stratalog.server.security.authorizer import Authorizer
from stratalog.server.security.principal import CallIdentity, Principal
from stratalog.server.settings import Settings
from stratalog.server.storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.storage.log_manager import GROUP_METADATA_TOPIC, LogManager

ADDRESS = "db1.example:9092"
LOG_DEFAULTS = {"log.retention.hours": "1", "log.cleaner.dedupe.buffer.size": "65536"}

Make = Callable[..., AdminManager]


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    """Builds one AdminManager over a fresh LogManager (``settings`` keyword arguments)."""
    opened: list[tuple[LogManager, ThreadPoolExecutor]] = []

    def build(authorizer: Authorizer | None = None, **options: Any) -> AdminManager:
        settings = Settings(log_dirs=[tmp_path / f"data{len(opened)}"], log_defaults=LOG_DEFAULTS, **options)
        log_manager = LogManager.open(settings.log_dirs, defaults=settings.log_defaults)
        executor = ThreadPoolExecutor(1)
        opened.append((log_manager, executor))
        replicas = ReplicaManager(log_manager, settings, ServerMetrics(), executor)
        return AdminManager(replicas, settings, executor, authorizer=authorizer)

    yield build
    for log_manager, executor in opened:
        executor.shutdown()
        log_manager.close()


async def test_create_takes_the_defaults_and_refuses_what_a_single_server_cannot_hold(
    make: Make,
) -> None:
    admin = make(num_partitions=3, topic_partitions_max=8)
    created = await admin.create_topic("t", configs={"retention.ms": "1000"})
    assert [p.partition for p in created.partitions] == [0, 1, 2]
    assert created.configs["retention.ms"] == "1000"
    assert created.overridden_configs == ("retention.ms",)
    for count in (0, -1, 9):
        with pytest.raises(InvalidPartitionsError, match=rf"1\.\.8 \(topic_partitions_max\), got {count}"):
            await admin.create_topic("bad", count)
    for factor in (-1, 2):
        with pytest.raises(InvalidReplicationFactorError, match="single server"):
            await admin.create_topic("bad", 1, replication_factor=factor)
    assert (await admin.create_topic("one", 1, replication_factor=1)).name == "one"
    with pytest.raises(TopicAlreadyExistsError):
        await admin.create_topic("t", 1)
    assert [t.description.name for t in await admin.list_topics()] == ["one", "t"]


async def test_validate_only_checks_everything_and_writes_nothing(make: Make) -> None:
    admin = make()
    would_be = await admin.create_topic("v", 4, {"cleanup.policy": "compact"},
                                        validate_only=True)
    assert (would_be.name, len(would_be.partitions)) == ("v", 4)
    assert would_be.configs["cleanup.policy"] == "compact"
    assert await admin.list_topics() == []
    with pytest.raises(InvalidConfigError, match=r"no\.such"):
        await admin.create_topic("v", 1, {"no.such": "1"}, validate_only=True)
    await admin.create_topic("v", 2)
    with pytest.raises(TopicAlreadyExistsError):
        await admin.create_topic("v", 1, validate_only=True)
    assert len((await admin.create_partitions("v", 5, validate_only=True)).partitions) == 2
    with pytest.raises(InvalidPartitionsError, match="can only be added"):
        await admin.create_partitions("v", 2, validate_only=True)
    unchanged = await admin.alter_topic_configs("v", {"retention.ms": "5"}, validate_only=True)
    assert unchanged.configs["retention.ms"] == "5"
    assert (await admin.describe_topic("v")).description.overridden_configs == ()
    assert len((await admin.create_partitions("v", 3)).partitions) == 3


async def test_internal_and_unknown_topics(make: Make) -> None:
    admin = make()
    for change in (admin.delete_topic(GROUP_METADATA_TOPIC),
                   admin.create_partitions(GROUP_METADATA_TOPIC, 2),
                   admin.alter_topic_configs(GROUP_METADATA_TOPIC, {"retention.ms": "1"})):
        with pytest.raises(InvalidTopicError, match="only the server writes it"):
            await change
    with pytest.raises(UnknownTopicOrPartitionError):
        await admin.delete_topic("missing")
    with pytest.raises(UnknownTopicOrPartitionError):
        await admin.describe_topic_configs("missing")
    await admin.create_topic("gone", 1)
    await admin.delete_topic("gone")
    assert await admin.list_topics() == []


async def test_alterations_replace_and_incremental(make: Make) -> None:
    admin = make()
    await admin.create_topic("c", 1, {"retention.ms": "1000", "segment.ms": "60000"})
    replaced = await admin.replace_topic_configs("c", {"retention.bytes": "4096"})
    assert replaced.overridden_configs == ("retention.bytes",)  # the others went back

    ops = [(ConfigOp.APPEND, "cleanup.policy", "compact"), (ConfigOp.SET, "segment.ms", "5000"),
           (ConfigOp.DELETE, "retention.bytes", None)]
    altered = await admin.incremental_alter_topic_configs("c", ops)
    assert altered.configs["cleanup.policy"] == "delete,compact"
    assert altered.overridden_configs == ("cleanup.policy", "segment.ms")
    subtracted = await admin.incremental_alter_topic_configs(
        "c", [(ConfigOp.SUBTRACT, "cleanup.policy", "delete")])
    assert subtracted.configs["cleanup.policy"] == "compact"

    with pytest.raises(InvalidConfigError, match="not a list"):
        await admin.incremental_alter_topic_configs(
            "c", [(ConfigOp.APPEND, "retention.ms", "5")])
    with pytest.raises(InvalidConfigError, match="more than once"):
        await admin.incremental_alter_topic_configs(
            "c", [(ConfigOp.SET, "retention.ms", "5"), (ConfigOp.DELETE, "retention.ms", None)])
    with pytest.raises(InvalidConfigError, match="both set and deleted"):
        await admin.alter_topic_configs("c", {"retention.ms": "5"}, ["retention.ms"])
    validated = await admin.incremental_alter_topic_configs(
        "c", [(ConfigOp.SET, "retention.ms", "7")], validate_only=True)
    assert validated.configs["retention.ms"] == "7"
    assert "retention.ms" not in (await admin.describe_topic("c")).description.overridden_configs


async def test_describe_configs_names_each_value_s_source(make: Make) -> None:
    admin = make()
    await admin.create_topic("d", 1, {"segment.bytes": "1048576"})
    entries = {entry.name: entry for entry in await admin.describe_topic_configs("d")}
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source, segment.is_default, segment.read_only) == (
        "1048576", ConfigSource.TOPIC_CONFIG, False, False)
    assert [(s.name, s.source) for s in segment.synonyms] == [
        ("segment.bytes", ConfigSource.TOPIC_CONFIG),
        ("segment.bytes", ConfigSource.DEFAULT_CONFIG)]
    retention = entries["retention.ms"]  # log.retention.hours = 1 in the settings
    assert (retention.value, retention.source) == ("3600000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG)]
    flush = entries["flush.messages"]
    assert (flush.source, flush.is_default) == (ConfigSource.DEFAULT_CONFIG, True)
    assert [entries[name].type for name in ("segment.bytes", "retention.ms", "preallocate",
                                             "cleanup.policy", "message.timestamp.type")] == [
        ConfigType.INT, ConfigType.LONG, ConfigType.BOOLEAN, ConfigType.LIST, ConfigType.STRING]

    broker = {entry.name: entry for entry in admin.describe_broker_configs()}
    assert all(entry.read_only and not entry.sensitive for entry in broker.values())
    assert (broker["log.retention.ms"].value, broker["log.retention.ms"].source) == (
        "3600000", ConfigSource.STATIC_BROKER_CONFIG)
    assert broker["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG
    assert broker["log.cleaner.dedupe.buffer.size"].value == "65536"
    assert broker["num.partitions"].value == "1"
    assert broker["auto.create.topics.enable"].value == "true"
    assert "log.dirs" not in broker  # clients never learn the server's paths


async def test_metadata_lists_the_unknown_and_auto_creates_as_allowed(make: Make) -> None:
    admin = make(num_partitions=2)
    await admin.create_topic("m", 1)
    answer = await admin.metadata(["m", "nope"], advertised_address=ADDRESS)
    assert [(b.node_id, b.address) for b in answer.brokers] == [(0, ADDRESS)]
    assert (answer.node_id, answer.controller.node_id) == (0, 0)
    assert [(t.name, [(p.leader, p.replicas, p.isr) for p in t.partitions])
            for t in answer.topics] == [("m", [(0, (0,), (0,))])]
    assert answer.unknown_topics == ("nope",)
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        answer.raise_for_unknown()

    created = await admin.metadata(["auto"], advertised_address=ADDRESS, allow_auto_create=True)
    assert [(t.name, len(t.partitions)) for t in created.topics] == [("auto", 2)]
    everything = await admin.metadata([], advertised_address=ADDRESS)
    assert [t.name for t in everything.topics] == ["auto", "m"]


async def test_auto_creation_follows_the_setting_and_the_acls(make: Make, tmp_path: Path) -> None:
    off = make(auto_create_topics_enable=False)
    answer = await off.metadata(["a"], advertised_address=ADDRESS, allow_auto_create=True)
    assert answer.unknown_topics == ("a",)

    (tmp_path / "acls").mkdir()
    store = AclStore.open([tmp_path / "acls"])
    store.write([AclBinding(ResourceType.TOPIC, "ok", PatternType.LITERAL, "User:alice", "*",
                            AclOperation.CREATE, AclPermissionType.ALLOW)])
    alice = CallIdentity(Principal.user("alice"), "10.0.0.1", "password")
    guarded = make(authorizer=Authorizer(store))
    answer = await guarded.metadata(["ok", "no"], advertised_address=ADDRESS,
                                    allow_auto_create=True, identity=alice)
    assert [t.name for t in answer.topics] == ["ok"]
    assert answer.unknown_topics == ("no",)
    anonymous = await guarded.metadata(["other"], advertised_address=ADDRESS,
                                       allow_auto_create=True)
    assert anonymous.unknown_topics == ("other",)
