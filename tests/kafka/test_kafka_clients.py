"""Real Kafka clients against the Kafka listener: produce with one, read with another, and with
the gRPC client: the same logs (issue 28)."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from stratalog.client import SyncClient


def _topic() -> str:
    return f"k-{uuid.uuid4().hex[:10]}"


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
    for i in range(100):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                         headers=[("h", f"{i}".encode())], timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0
    with SyncClient(server.target) as client:
        records = client.fetch_by_offset(topic, 0, 0, max_bytes=1 << 20).records
    assert [(r.key, r.value) for r in records] == [
        (f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
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
                             consumer_timeout_ms=10_000)
    values = [m.value for m in consumer]
    consumer.close()
    assert values == [f"r{i}".encode() for i in range(30)]
