"""Records written through the Kafka listener by librdkafka (confluent-kafka), read by Spark
through the connector: the same rows the gRPC client reads (issue 28, interchange)."""

from __future__ import annotations

from confluent_kafka import Producer

from .test_read import BASE_TS, client_rows, reader, spark_rows


def test_spark_reads_what_librdkafka_produced(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 5,
                         "compression.type": "zstd", "enable.idempotence": False})
    for i in range(60):
        producer.produce(topic, partition=i % 2, key=f"k{i}".encode(),
                         value=f"v{i}".encode(), timestamp=BASE_TS + i,
                         headers=[("source", b"librdkafka"), ("i", f"{i}".encode())])
    assert producer.flush(30) == 0
    rows = reader(server, subscribe=topic, includeHeaders="true")(spark).collect()
    assert spark_rows(rows, with_headers=True) == client_rows(client, topic, 2)
    assert sorted((r["key"], r["value"]) for r in rows) == sorted(
        (f"k{i}".encode(), f"v{i}".encode()) for i in range(60))
    assert all(r["headers"][0]["value"] == b"librdkafka" for r in rows)
