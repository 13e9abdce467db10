"""Kafka's admin APIs against a real server, through confluent-kafka's AdminClient (librdkafka)
and kafka-python's KafkaAdminClient: CreateTopics (configs, validate_only), DescribeConfigs
(an override seen with its source), AlterConfigs and IncrementalAlterConfigs,
CreatePartitions, DeleteRecords (the new log start seen by ListOffsets and the gRPC client),
DeleteTopics, DescribeCluster, and the errors each with its Kafka code (issue 28)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
)

from stratalog.client import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    SyncClient,
)

from .kafka_wire import KafkaWire

TIMEOUT_S = 30
ANONYMOUS = "User:ANONYMOUS"

# confluent-kafka deprecates alter_configs for incremental_alter_configs; AlterConfigs is one
# of the APIs under test here.
pytestmark = pytest.mark.filterwarnings(
    "ignore:alter_configs has been deprecated:DeprecationWarning")


def _topic() -> str:
    return f"adm-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def admin(server) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.kafka_bootstrap})


@pytest.fixture(scope="module")
def kp_admin(server) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap,
                              request_timeout_ms=TIMEOUT_S * 1000)
    yield client
    client.close()


def _create(admin: AdminClient, *topics: NewTopic, **options: object) -> None:
    for future in admin.create_topics(list(topics), **options).values():
        future.result(TIMEOUT_S)


def _error(future) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(TIMEOUT_S)
    return caught.value.args[0]


def _described(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return future.result(TIMEOUT_S)


def test_create_with_configs_and_describe_the_override_with_its_source(server, admin) -> None:
    topic = _topic()
    _create(admin, NewTopic(topic, num_partitions=3, replication_factor=1,
                            config={"retention.ms": "3600000"}))
    with SyncClient(server.target) as client:
        described = client.describe_topic(topic)
    assert described.num_partitions == 3
    assert described.configs["retention.ms"] == "3600000"
    configs = _described(admin, topic)
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert not retention.is_default and not retention.is_read_only
    segment = configs["segment.bytes"]
    assert (segment.source, segment.is_default) == (ConfigSource.DEFAULT_CONFIG.value, True)


def test_validate_only_creates_nothing_and_the_defaults_apply(server, admin) -> None:
    topic = _topic()
    _create(admin, NewTopic(topic, num_partitions=2), validate_only=True)
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics
    _create(admin, NewTopic(topic))  # -1, -1: num_partitions and the replication factor's
    with SyncClient(server.target) as client:
        assert client.describe_topic(topic).num_partitions == 1


def test_create_errors_carry_kafka_s_codes(admin) -> None:
    topic = _topic()
    _create(admin, NewTopic(topic, num_partitions=1))
    cases = {
        topic: (NewTopic(topic, num_partitions=1), KafkaError.TOPIC_ALREADY_EXISTS),
        "bad-config": (NewTopic(_topic(), num_partitions=1, config={"no.such.config": "1"}),
                       KafkaError.INVALID_CONFIG),
        # Above topic_partitions_max (10,000 by default).
        "too-many": (NewTopic(_topic(), num_partitions=10_001), KafkaError.INVALID_PARTITIONS),
        "factor": (NewTopic(_topic(), num_partitions=1, replication_factor=3),
                   KafkaError.INVALID_REPLICATION_FACTOR),
        "name": (NewTopic("bad/name", num_partitions=1), KafkaError.TOPIC_EXCEPTION),
    }
    for label, (new_topic, code) in cases.items():
        [future] = admin.create_topics([new_topic]).values()
        error = _error(future)
        assert error.code() == code, (label, error)
    assert "no.such.config" in _error(admin.create_topics([cases["bad-config"][0]])
                                      [cases["bad-config"][0].topic]).str()


def test_alter_and_incremental_alter(admin) -> None:
    topic = _topic()
    _create(admin, NewTopic(topic, num_partitions=1, config={"segment.ms": "60000"}))
    resource = ConfigResource("topic", topic, set_config={"retention.bytes": "4096"})
    for future in admin.alter_configs([resource]).values():  # replaces every override
        future.result(TIMEOUT_S)
    configs = _described(admin, topic)
    assert configs["retention.bytes"].value == "4096"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    incremental = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("segment.ms", "5000", incremental_operation=AlterConfigOpType.SET),
    ])
    for future in admin.incremental_alter_configs([incremental]).values():
        future.result(TIMEOUT_S)
    configs = _described(admin, topic)
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.ms"].value == "5000"

    wrong = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    [future] = admin.incremental_alter_configs([wrong]).values()
    assert _error(future).code() == KafkaError.INVALID_CONFIG
    unknown = ConfigResource("topic", topic, set_config={"nope.ms": "1"})
    [future] = admin.alter_configs([unknown]).values()
    assert _error(future).code() == KafkaError.INVALID_CONFIG


def test_broker_configs_are_described_read_only_and_not_altered(admin) -> None:
    [future] = admin.describe_configs([ConfigResource("broker", "0")]).values()
    configs = future.result(TIMEOUT_S)
    assert configs["num.partitions"].value == "1"
    assert all(entry.is_read_only for entry in configs.values())
    assert "log.dirs" not in configs
    assert configs["log.retention.ms"].value == "604800000"
    change = ConfigResource("broker", "0", set_config={"num.partitions": "3"})
    [future] = admin.alter_configs([change]).values()
    error = _error(future)
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "config file" in error.str()


def test_create_partitions(server, admin) -> None:
    topic = _topic()
    _create(admin, NewTopic(topic, num_partitions=1))
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(TIMEOUT_S)
    with SyncClient(server.target) as client:
        assert client.describe_topic(topic).num_partitions == 3
    [future] = admin.create_partitions([NewPartitions(topic, 2)]).values()
    assert _error(future).code() == KafkaError.INVALID_PARTITIONS


def test_delete_records_moves_the_log_start(server, admin) -> None:
    topic = _topic()
    _create(admin, NewTopic(topic, num_partitions=1))
    with SyncClient(server.target) as client:
        client.produce(topic, 0, [b"r%d" % i for i in range(10)])
    [future] = admin.delete_records([TopicPartition(topic, 0, 4)]).values()
    assert future.result(TIMEOUT_S).low_watermark == 4
    with SyncClient(server.target) as client:
        assert client.describe_topic(topic).partitions[0].log_start_offset == 4
    consumer = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap)
    try:  # ListOffsets' earliest
        from kafka import TopicPartition as KpTopicPartition

        partition = KpTopicPartition(topic, 0)
        assert consumer.beginning_offsets([partition])[partition] == 4
    finally:
        consumer.close()
    [future] = admin.delete_records([TopicPartition(topic, 0, 99)]).values()
    assert _error(future).code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_delete_topics(admin) -> None:
    topic = _topic()
    _create(admin, NewTopic(topic, num_partitions=1))
    for future in admin.delete_topics([topic]).values():
        future.result(TIMEOUT_S)
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics
    [future] = admin.delete_topics([topic]).values()
    assert _error(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def _round_trip(bootstrap: str, request, response_class, version: int):
    """One request on a fresh connection, encoded and decoded by kafka-python's classes (the
    oracle: tests/kafka/kafka_wire.py)."""
    with KafkaWire(bootstrap, TIMEOUT_S) as wire:
        return wire.call(request, response_class, version)


def test_describe_cluster(server) -> None:
    from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

    host, port = server.kafka_bootstrap.rsplit(":", 1)
    for version in (0, 1):
        request = DescribeClusterRequest(include_cluster_authorized_operations=True,
                                         endpoint_type=1)
        answer = _round_trip(server.kafka_bootstrap, request, DescribeClusterResponse, version)
        assert answer.error_code == 0
        assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [(0, host, int(port))]
        assert answer.controller_id == 0 and answer.cluster_id
        # No authorizer: every cluster operation (CREATE 5 ... IDEMPOTENT_WRITE 12).
        assert answer.authorized_operations == {5, 7, 8, 9, 10, 11, 12}
    request = DescribeClusterRequest(include_cluster_authorized_operations=False,
                                     endpoint_type=2)
    answer = _round_trip(server.kafka_bootstrap, request, DescribeClusterResponse, 1)
    assert answer.error_code == KafkaError.MISMATCHED_ENDPOINT_TYPE
    assert answer.authorized_operations is None


def test_kafka_python_admin_client(server, kp_admin) -> None:
    topic = _topic()
    kp_admin.create_topics([KpNewTopic(topic, 2, 1, topic_configs={"retention.ms": "7200000"})])
    with pytest.raises(TopicAlreadyExistsError):
        kp_admin.create_topics([KpNewTopic(topic, 2, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        kp_admin.create_topics([KpNewTopic(_topic(), 1, 2)])
    with pytest.raises(InvalidPartitionsError):
        kp_admin.create_topics([KpNewTopic(_topic(), 0, 1)])
    described = kp_admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)])
    # kafka-python keeps the configs that are not defaults ("modified"): the override alone.
    [(name, entry)] = described["topic"][topic].items()
    assert (name, entry["value"], entry["config_source"], entry["read_only"]) == (
        "retention.ms", "7200000", "DYNAMIC_TOPIC_CONFIG", False)
    kp_admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                             configs={"retention.ms": "60000"})])
    kp_admin.create_partitions({topic: KpNewPartitions(4)})
    with SyncClient(server.target) as client:
        described_topic = client.describe_topic(topic)
    assert described_topic.configs["retention.ms"] == "60000"
    assert described_topic.num_partitions == 4
    kp_admin.delete_topics([topic])
    assert topic not in kp_admin.list_topics()


def test_each_topic_and_the_cluster_authorized_as_kafka_does(start_server, tmp_path) -> None:
    """An anonymous Kafka client (no SASL, plaintext) on a server with ACLs: CREATE and
    DESCRIBE on topics prefixed ok- and ALTER_CONFIGS on ok-conf only. Each topic is refused on its own, with
    TOPIC_AUTHORIZATION_FAILED; a broker's configs need DESCRIBE_CONFIGS on the cluster."""
    data = tmp_path / "data"
    granting = start_server(data, "--authorizer", "acl", "--super-users", ANONYMOUS)
    with SyncClient(granting.target) as client:
        client.create_acls([
            AclBinding(ResourceType.TOPIC, "ok-", PatternType.PREFIXED, ANONYMOUS, "*",
                       AclOperation.CREATE, AclPermissionType.ALLOW),
            # DESCRIBE for Metadata: librdkafka finds a partition's leader before it asks.
            AclBinding(ResourceType.TOPIC, "ok-", PatternType.PREFIXED, ANONYMOUS, "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "ok-conf", PatternType.LITERAL, ANONYMOUS, "*",
                       AclOperation.ALTER_CONFIGS, AclPermissionType.ALLOW),
        ])
    assert granting.stop() == 0
    server = start_server(data, "--authorizer", "acl")
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    futures = admin.create_topics([NewTopic("ok-a", 1), NewTopic("ok-conf", 1),
                                   NewTopic("no-a", 1)])
    futures["ok-a"].result(TIMEOUT_S)
    futures["ok-conf"].result(TIMEOUT_S)
    assert _error(futures["no-a"]).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    refused = {
        "DeleteTopics": admin.delete_topics(["ok-a"])["ok-a"],
        "CreatePartitions": admin.create_partitions([NewPartitions("ok-a", 2)])["ok-a"],
        "DeleteRecords": admin.delete_records([TopicPartition("ok-a", 0, 0)])[
            TopicPartition("ok-a", 0, 0)],
        "DescribeConfigs": admin.describe_configs([ConfigResource("topic", "ok-a")])[
            ConfigResource("topic", "ok-a")],
        "IncrementalAlterConfigs": admin.incremental_alter_configs([ConfigResource(
            "topic", "ok-a", incremental_configs=[ConfigEntry(
                "retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])])[
            ConfigResource("topic", "ok-a")],
    }
    for name, future in refused.items():
        assert _error(future).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, name
    # ALTER_CONFIGS on ok-conf implies DESCRIBE_CONFIGS on it (Kafka's implication).
    altered = ConfigResource("topic", "ok-conf", incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([altered])[altered].result(TIMEOUT_S)
    assert _described(admin, "ok-conf")["retention.ms"].value == "60000"
    [broker] = admin.describe_configs([ConfigResource("broker", "0")]).values()
    assert _error(broker).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_request_shapes_on_the_wire(server) -> None:
    """What the clients above never send, with kafka-python's classes as the oracle: v7's
    answer with the topic's configs, duplicates, manual assignments, a replication factor of 0,
    a topic id without a name, synonyms, unsupported resource types, another broker's id and an
    unknown incremental operation."""
    from kafka.protocol.admin import (
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )

    new = CreateTopicsRequest.CreatableTopic
    config = new.CreatableTopicConfig
    topic, twice = _topic(), _topic()
    request = CreateTopicsRequest(topics=[
        new(name=topic, num_partitions=-1, replication_factor=-1, assignments=[],
            configs=[config(name="retention.ms", value="1000")]),
        new(name=twice, num_partitions=1, replication_factor=1, assignments=[], configs=[]),
        new(name=twice, num_partitions=2, replication_factor=1, assignments=[], configs=[]),
        new(name=_topic(), num_partitions=1, replication_factor=0, assignments=[], configs=[]),
        new(name=_topic(), num_partitions=-1, replication_factor=-1, configs=[], assignments=[
            new.CreatableReplicaAssignment(partition_index=0, broker_ids=[0])]),
    ], timeout_ms=30_000, validate_only=False)
    answer = _round_trip(server.kafka_bootstrap, request, CreateTopicsResponse, 7)
    created, repeated, factor, assigned = answer.topics
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 1, 1)
    configs = {c.name: (c.value, c.config_source, c.read_only) for c in created.configs}
    assert configs["retention.ms"] == ("1000", 1, False)  # TOPIC_CONFIG
    assert configs["segment.bytes"][1] == 5  # DEFAULT_CONFIG
    assert (repeated.name, repeated.error_code) == (twice, KafkaError.INVALID_REQUEST)
    assert factor.error_code == KafkaError.INVALID_REPLICATION_FACTOR
    assert "larger than 0, or -1" in factor.error_message
    assert assigned.error_code == KafkaError.INVALID_REQUEST
    assert "assignments" in assigned.error_message

    state = DeleteTopicsRequest.DeleteTopicState
    deleted = _round_trip(server.kafka_bootstrap, DeleteTopicsRequest(
        topics=[state(name=None, topic_id=uuid.uuid4())], timeout_ms=30_000),
        DeleteTopicsResponse, 6)
    assert [r.error_code for r in deleted.responses] == [KafkaError.UNKNOWN_TOPIC_ID]

    resource = DescribeConfigsRequest.DescribeConfigsResource
    described = _round_trip(server.kafka_bootstrap, DescribeConfigsRequest(resources=[
        resource(resource_type=2, resource_name=topic, configuration_keys=["retention.ms"]),
        resource(resource_type=8, resource_name="0", configuration_keys=None),
        resource(resource_type=4, resource_name="7", configuration_keys=None),
        resource(resource_type=4, resource_name="", configuration_keys=None),
    ], include_synonyms=True, include_documentation=False), DescribeConfigsResponse, 4)
    mine, logger, other, defaults = described.results
    [retention] = mine.configs
    assert retention.config_type == 5  # LONG
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "1000", 1), ("retention.ms", "604800000", 5)]
    assert logger.error_code == KafkaError.INVALID_REQUEST
    assert "unsupported resource type BROKER_LOGGER" in logger.error_message
    assert other.error_code == KafkaError.INVALID_REQUEST and "this broker is 0" in other.error_message
    assert (defaults.error_code, defaults.configs) == (0, [])  # no dynamic cluster defaults

    alter = IncrementalAlterConfigsRequest.AlterConfigsResource
    altered = _round_trip(server.kafka_bootstrap, IncrementalAlterConfigsRequest(resources=[
        alter(resource_type=2, resource_name=topic, configs=[
            alter.AlterableConfig(name="retention.ms", config_operation=9, value="1")]),
    ], validate_only=False), IncrementalAlterConfigsResponse, 1)
    [result] = altered.responses
    assert result.error_code == KafkaError.INVALID_REQUEST
    assert "unknown operation 9" in result.error_message
