"""Phase ``first`` of make docker-test: a fresh container on an empty volume, from the host.

The core of the integration suite, against the image as deployed: health and reflection,
create a topic, produce with every codec (the compression libraries inside the image), fetch by
offset and by timestamp, list offsets, the Producer and Consumer of the client library, and the
metrics endpoint. What is written here is read again by test_restarted_container.py after the
container was stopped with SIGTERM and a new one started on the same volume.
"""

from __future__ import annotations

import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from stratalog.client import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    Client,
    Consumer,
    Producer,
    ProduceResult,
    SyncClient,
    partition_for_key,
)

BROKER_SERVICE = "stratalog.v1.Broker"


@pytest.fixture(scope="module")
def produced(client: SyncClient, dataset) -> dict[int, list[ProduceResult]]:
    """Create the ``events`` topic and write every batch of the dataset; the Produce results."""
    info = client.create_topic(
        dataset.events_topic,
        dataset.partitions,
        {"retention.ms": "-1", "segment.bytes": str(dataset.segment_bytes)},
    )
    assert info.num_partitions == dataset.partitions
    results: dict[int, list[ProduceResult]] = {}
    for partition in range(dataset.partitions):
        results[partition] = [
            client.produce(dataset.events_topic, partition, records, compression=compression)
            for compression, records in dataset.batches(partition)
        ]
    return results


def test_health_reports_serving(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", BROKER_SERVICE):
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING, service


def test_reflection_lists_the_services(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        responses = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    names = {s.name for s in responses[0].list_services_response.service}
    assert {BROKER_SERVICE, "grpc.health.v1.Health"} <= names


def test_produce_assigns_contiguous_offsets(produced, dataset) -> None:
    for partition, results in produced.items():
        next_offset = 0
        for result in results:
            assert result.base_offset == next_offset
            assert result.record_count == dataset.batch_records
            assert result.last_offset == next_offset + dataset.batch_records - 1
            next_offset = result.last_offset + 1
        assert next_offset == dataset.record_count(partition)


def test_topic_lives_in_the_volume(client: SyncClient, produced, dataset) -> None:
    info = client.describe_topic(dataset.events_topic)
    assert info.configs["retention.ms"] == "-1"
    assert info.configs["segment.bytes"] == str(dataset.segment_bytes)
    for p in info.partitions:
        assert p.log_dir == "0"  # the image's one log dir, by its index: never a path
        assert (p.log_start_offset, p.log_end_offset) == (0, dataset.record_count(p.partition))
        assert p.max_timestamp == dataset.timestamp_ms(dataset.record_count(p.partition) - 1)
    # 26 batches of 50 incompressible 2 KiB values: more than two 1 MiB segments.
    assert info.partitions[0].segment_count >= 3


def test_fetch_by_offset_reads_back_every_record(
    client: SyncClient, produced, dataset, read_partition
) -> None:
    for partition in range(dataset.partitions):
        records = read_partition(client, dataset.events_topic, partition)
        assert dataset.observed(records) == dataset.expected(partition), partition


def test_fetch_from_an_offset_inside_a_batch(client: SyncClient, produced, dataset) -> None:
    offset = dataset.record_count(0) // 2 + 7  # inside a batch, in a middle segment
    result = client.fetch_by_offset(dataset.events_topic, 0, offset)
    assert result.records and result.records[0].offset == offset
    assert dataset.observed(result.records) == dataset.expected(0)[offset : result.next_offset]
    assert result.high_watermark == dataset.record_count(0)


def test_fetch_by_timestamp(client: SyncClient, produced, dataset) -> None:
    for partition in range(dataset.partitions):
        wanted = dataset.record_count(partition) - 60
        # Halfway between two records: the first one at or after it is `wanted`.
        result = client.fetch_by_timestamp(
            dataset.events_topic, partition, dataset.timestamp_ms(wanted) - 5
        )
        assert (result.matched_offset, result.matched_timestamp) == (
            wanted, dataset.timestamp_ms(wanted)
        )
        assert result.records[0].offset == wanted
        assert dataset.observed(result.records) == (
            dataset.expected(partition)[wanted : result.next_offset]
        )
        later = client.fetch_by_timestamp(
            dataset.events_topic, partition, dataset.timestamp_ms(dataset.record_count(partition))
        )
        assert (later.matched_offset, later.records) == (-1, [])


def test_list_offsets(client: SyncClient, produced, dataset) -> None:
    topic = dataset.events_topic
    for partition in range(dataset.partitions):
        count = dataset.record_count(partition)
        assert client.list_offsets(topic, partition, EARLIEST).offset == 0
        assert client.list_offsets(topic, partition, LATEST).offset == count
        assert tuple(client.list_offsets(topic, partition, MAX_TIMESTAMP)) == (
            count - 1, dataset.timestamp_ms(count - 1)
        )
        assert tuple(client.list_offsets(topic, partition, dataset.timestamp_ms(123))) == (
            123, dataset.timestamp_ms(123)
        )
        assert client.list_offsets(topic, partition, dataset.timestamp_ms(count)).offset == -1


async def test_producer_and_consumer(target: str, dataset) -> None:
    pairs = dataset.keyed()
    async with Client(target, timeout_s=30) as client:
        await client.create_topic(
            dataset.keyed_topic, dataset.keyed_partitions, {"retention.ms": "-1"}
        )
        async with Producer(client, compression="zstd") as producer:
            futures = [await producer.send(dataset.keyed_topic, v, k) for k, v in pairs]
            metadata = [await f for f in futures]
        for (key, _), meta in zip(pairs, metadata, strict=True):
            assert meta.partition == partition_for_key(key, dataset.keyed_partitions)
        async with Consumer(client, dataset.keyed_topic, start="earliest") as consumer:
            consumed = [record async for record in consumer]
    assert sorted((r.key, r.value) for r in consumed) == sorted(pairs)
    # Per key, records come back in the order they were sent (one partition per key).
    for key in {k for k, _ in pairs}:
        assert [r.value for r in consumed if r.key == key] == [v for k, v in pairs if k == key]


def test_kafka_clients_reach_the_container(
    client: SyncClient, kafka_bootstrap: str, dataset
) -> None:
    """kafka-python produces to the container's Kafka listener (the address it advertises is
    the one the test reaches), and the gRPC client reads the same log back (issue 28)."""
    from kafka import KafkaConsumer, KafkaProducer

    topic, count = dataset.kafka_topic, dataset.kafka_records
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all",
                             enable_idempotence=False)
    sent = [producer.send(topic, key=b"k", value=f"v{i}".encode()) for i in range(count)]
    assert [future.get(timeout=30).offset for future in sent] == list(range(count))
    producer.close()
    records = client.fetch_by_offset(topic, 0, 0).records
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(count)]
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    assert [m.value for m in consumer] == [f"v{i}".encode() for i in range(count)]
    consumer.close()


def test_metrics_endpoint_counts_the_records(produced, dataset, metrics_url: str) -> None:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    records_in = {
        sample.labels["topic"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "stratalog_records_in_total"
    }
    total = sum(dataset.record_count(p) for p in range(dataset.partitions))
    assert records_in[dataset.events_topic] == total
