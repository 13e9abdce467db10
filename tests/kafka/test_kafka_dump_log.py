"""What librdkafka writes through the Kafka listener is Kafka's on-disk format: `stratalog
dump-log` (kafka-dump-log.sh's counterpart) prints its batches and records (issue 28)."""

from __future__ import annotations

import subprocess
import sys
import uuid

from confluent_kafka import Producer

from stratalog.client import SyncClient

PAD = b"x" * 400


def test_dump_log_prints_what_librdkafka_wrote(server):
    topic = f"d-{uuid.uuid4().hex[:10]}"
    with SyncClient(server.target) as client:
        client.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 20,
                         "compression.type": "lz4", "enable.idempotence": False})
    for i in range(5):
        # Compressible values: librdkafka sends a batch uncompressed when lz4 would not
        # make it smaller.
        producer.produce(topic, key=f"key{i}".encode(), value=f"value{i}".encode() + PAD,
                         timestamp=1_700_000_000_000 + i, headers=[("h", b"x")])
    assert producer.flush(30) == 0
    segment = server.data_dir / f"{topic}-0" / "00000000000000000000.log"
    printed = subprocess.run(
        [sys.executable, "-m", "stratalog.cli.main", "dump-log", "--deep-iteration",
         "--print-data-log", str(segment)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    assert "compresscodec: lz4" in printed.lower()
    for i in range(5):
        assert f"key: key{i}" in printed and f"payload: value{i}{PAD.decode()}" in printed
        assert f"CreateTime: {1_700_000_000_000 + i}" in printed
