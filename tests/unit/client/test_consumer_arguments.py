"""The Consumer's arguments: what it reads (one topic, topics, a pattern), the group settings and
their checks, all refused at construction with an error naming the problem. Reading runs
against real servers in tests/integration/ (test_client_producer_consumer.py,
test_client_group_consumer.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from stratalog.client.client import Client
from stratalog.client.consumer import Consumer
from stratalog.client.groups import RangeAssignor
from stratalog.client.types import TopicPartition


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    client = Client("127.0.0.1:1")  # never connected: nothing here sends
    yield client
    await client.close()


async def test_exactly_one_of_topic_topics_pattern(client: Client) -> None:
    with pytest.raises(TypeError, match="exactly one of topic, topics= or pattern="):
        Consumer(client)
    with pytest.raises(TypeError, match="exactly one of"):
        Consumer(client, "a", topics=["b"])
    with pytest.raises(TypeError, match="exactly one of"):
        Consumer(client, topics=["b"], pattern="b.*", group_id="g")
    with pytest.raises(TypeError, match="non-empty sequence of topic names"):
        Consumer(client, topics="abc")
    with pytest.raises(TypeError, match="non-empty sequence"):
        Consumer(client, topics=[])
    with pytest.raises(ValueError, match="duplicates"):
        Consumer(client, topics=["a", "a"])


async def test_group_arguments_are_checked(client: Client) -> None:
    with pytest.raises(TypeError, match="pattern= needs group_id="):
        Consumer(client, pattern="a.*")
    with pytest.raises(TypeError, match="need group_id="):
        Consumer(client, "a", group_instance_id="i")
    with pytest.raises(TypeError, match="partitions= is for one topic without a group"):
        Consumer(client, "a", group_id="g", partitions=[0])
    with pytest.raises(TypeError, match="partitions= is for one topic"):
        Consumer(client, topics=["a", "b"], partitions=[0])
    with pytest.raises(ValueError, match="is not a regular expression"):
        Consumer(client, pattern="(", group_id="g")
    with pytest.raises(ValueError, match=r"heartbeat_interval_ms .* below"):
        Consumer(client, "a", group_id="g", session_timeout_ms=1000,
                 heartbeat_interval_ms=1000)
    with pytest.raises(ValueError, match="group_id must be a non-empty string"):
        Consumer(client, "a", group_id="")
    with pytest.raises(TypeError, match="on_partitions_revoked must be callable"):
        Consumer(client, "a", group_id="g", on_partitions_revoked=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="enable_auto_commit must be a bool"):
        Consumer(client, "a", group_id="g", enable_auto_commit=1)  # type: ignore[arg-type]


async def test_group_defaults_and_settings_reach_the_member(client: Client) -> None:
    consumer = Consumer(client, topics=["a", "b"], group_id="g", assignors=[RangeAssignor()],
                        isolation_level=1, auto_commit_interval_ms=250)
    settings = consumer._group_settings
    assert settings is not None
    config = settings["config"]
    # Kafka's default where nothing is committed; the plain Consumer's stays "earliest".
    assert config.auto_offset_reset == "latest"
    assert Consumer(client, "a")._auto_offset_reset == "earliest"
    assert config.topics == ("a", "b") and config.auto_commit_interval_ms == 250
    assert [a.name for a in config.assignors] == ["range"]
    assert config.require_stable_offsets  # READ_COMMITTED fetches stable offsets only
    assert consumer._follow  # a group member follows its partitions
    pattern = Consumer(client, pattern=re.compile("t-.*"), group_id="g")
    assert pattern._group_settings is not None
    assert pattern._group_settings["pattern"].pattern == "t-.*"


async def test_group_only_methods_need_a_group(client: Client) -> None:
    plain = Consumer(client, "a")
    with pytest.raises(RuntimeError, match="commit\\(\\) needs a group"):
        await plain.commit()
    with pytest.raises(RuntimeError, match="group_metadata\\(\\) needs a group"):
        plain.group_metadata()
    grouped = Consumer(client, "a", group_id="g")
    with pytest.raises(RuntimeError, match="has not started"):
        grouped.group_metadata()
    several = Consumer(client, topics=["a", "b"])
    with pytest.raises(TypeError, match="name it as a TopicPartition"):
        several.position(0)
    with pytest.raises(RuntimeError, match="has not started"):
        several.position(TopicPartition("a", 0))
