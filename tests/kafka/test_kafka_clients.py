"""Real Kafka clients against the Kafka listener: produce with one, read with another, and with
the gRPC client: the same logs (issue 28)."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from stratalog.client import FetchFormat, SyncClient
from stratalog.records import iter_batch_headers


def _topic() -> str:
    return f"k-{uuid.uuid4().hex[:10]}"


def _take(consumer: KafkaConsumer, count: int) -> list[bytes]:
    """The values of the next ``count`` records (the consumer's timeout ends a shortfall)."""
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == count:
            break
    return values


def test_kcat_produces_and_reads_back_keys_and_values(server, kcat):
    topic = _topic()
    lines = "".join(f"key{i}:value{i}\n" for i in range(20))
    subprocess.run([kcat, "-b", server.kafka_bootstrap, "-P", "-t", topic, "-K:"],
                   input=lines.encode(), check=True, timeout=30)
    out = subprocess.run(
        [kcat, "-b", server.kafka_bootstrap, "-C", "-t", topic, "-e", "-f", "%o %k %s\n"],
        capture_output=True, check=True, timeout=30,
    ).stdout.decode().splitlines()
    assert out == [f"{i} key{i} value{i}" for i in range(20)]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_produces_with_each_codec_and_the_grpc_client_reads(server, compression):
    topic = _topic()
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap,
                         "compression.type": compression, "linger.ms": 5})
    # Compressible values: librdkafka sends a batch as it is when the codec would not shrink it.
    values = [f"v{i}".encode() + b"." * 100 for i in range(100)]
    for i in range(100):
        producer.produce(topic, key=f"k{i}".encode(), value=values[i],
                         headers=[("h", f"{i}".encode())], timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0
    with SyncClient(server.target) as client:
        records = client.fetch_by_offset(topic, 0, 0, max_bytes=1 << 20).records
        stored = client.fetch_by_offset(topic, 0, 0, max_bytes=1 << 20,
                                        fetch_format=FetchFormat.RECORD_BATCHES).record_batches
    # The codec librdkafka used is the one stored (it falls back to none against a broker
    # whose advertised versions lack what a codec needs: KAFKA-18659, FindCoordinator v0 for
    # lz4).
    assert {h.compression.name.lower() for h in iter_batch_headers(stored)} == {compression}
    assert [(r.key, r.value) for r in records] == [
        (f"k{i}".encode(), values[i]) for i in range(100)]
    assert [r.timestamp for r in records] == [1_700_000_000_000 + i for i in range(100)]
    assert [dict(r.headers) for r in records] == [{"h": f"{i}".encode()} for i in range(100)]


def test_kafka_python_produces_and_librdkafka_reads(server):
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=server.kafka_bootstrap, acks="all")
    futures = [producer.send(topic, key=b"k", value=f"v{i}".encode()) for i in range(50)]
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    assert offsets == list(range(50))
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "g-" + topic,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    try:
        while len(values) < 50:
            message = consumer.poll(10)
            assert message is not None, f"no record after {len(values)}"
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(50)]


def test_kafka_python_consumer_reads_without_a_group(server):
    topic = _topic()
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for i in range(30):
        producer.produce(topic, value=f"r{i}".encode())
    producer.flush(30)
    consumer = KafkaConsumer(topic, bootstrap_servers=server.kafka_bootstrap,
                             auto_offset_reset="earliest", group_id=None,
                             consumer_timeout_ms=30_000)
    values = _take(consumer, 30)
    consumer.close()
    assert values == [f"r{i}".encode() for i in range(30)]


async def test_aiokafka_produces_and_reads_back(server):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = _topic()
    producer = AIOKafkaProducer(bootstrap_servers=server.kafka_bootstrap,
                                enable_idempotence=True, compression_type="gzip")
    await producer.start()
    try:
        sent = [await producer.send_and_wait(topic, f"a{i}".encode(), key=b"k")
                for i in range(10)]
    finally:
        await producer.stop()
    assert [m.offset for m in sent] == list(range(10))
    consumer = AIOKafkaConsumer(bootstrap_servers=server.kafka_bootstrap, group_id=None,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        partition = AioTopicPartition(topic, 0)
        consumer.assign([partition])
        batches = await consumer.getmany(partition, timeout_ms=10_000, max_records=10)
        values = [m.value for m in batches.get(partition, [])]
    finally:
        await consumer.stop()
    assert values == [f"a{i}".encode() for i in range(10)]


def test_kafka_python_seeks_by_timestamp(server):
    """offsets_for_times is ListOffsets with a timestamp: the first record at or after it."""
    from kafka import TopicPartition as KpTopicPartition

    topic = _topic()
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for i in range(10):
        producer.produce(topic, value=f"t{i}".encode(), timestamp=1_700_000_000_000 + 1000 * i)
    producer.flush(30)
    consumer = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap, group_id=None,
                             consumer_timeout_ms=30_000)
    partition = KpTopicPartition(topic, 0)
    found = consumer.offsets_for_times({partition: 1_700_000_000_000 + 6_500})
    assert (found[partition].offset, found[partition].timestamp) == (7, 1_700_000_007_000)
    consumer.assign([partition])
    consumer.seek(partition, found[partition].offset)
    assert _take(consumer, 3) == [b"t7", b"t8", b"t9"]
    assert consumer.end_offsets([partition]) == {partition: 10}
    assert consumer.beginning_offsets([partition]) == {partition: 0}
    consumer.close()
