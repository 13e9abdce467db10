"""Kafka's admin APIs against a real server, through confluent-kafka's AdminClient (librdkafka)
and kafka-python's KafkaAdminClient: CreateTopics (configs, validate_only), DescribeConfigs
(an override seen with its source), AlterConfigs and IncrementalAlterConfigs,
CreatePartitions, DeleteRecords (the new log start seen by ListOffsets and the gRPC client),
DeleteTopics, DescribeCluster, and the errors each with its Kafka code (issue 28)."""

from __future__ import annotations

import io
import socket
import struct
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

from stratalog.client import SyncClient

TIMEOUT_S = 30

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
    """One request on a fresh connection, framed, encoded and decoded by kafka-python's classes
    (the oracle: the clients here ask Metadata for the cluster, never DescribeCluster)."""
    request.API_VERSION = version
    request.with_header(correlation_id=7)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as connection:
        connection.sendall(request.encode(version=version, header=True, framed=True))
        with connection.makefile("rb") as stream:
            (size,) = struct.unpack(">i", stream.read(4))
            body = stream.read(size)
    assert struct.unpack(">i", body[:4]) == (7,)
    # Response header v1 (a flexible version): an empty tagged-field list after the id.
    header_bytes = 5 if response_class.flexible_version_q(version) else 4
    return response_class.decode(io.BytesIO(body[header_bytes:]), version=version)


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
