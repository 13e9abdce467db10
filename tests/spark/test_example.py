"""The example pipeline (examples/pipeline.py) against the live server."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

from stratalog.client import FetchFormat, ProducerRecord, decode_fetched

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"
MINUTE_MS = 60_000
START_MS = 1_763_800_020_000 // MINUTE_MS * MINUTE_MS


def load_pipeline():
    spec = importlib.util.spec_from_file_location("stratalog_example_pipeline", PIPELINE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_activity_per_minute(spark, client, server, topic_name):
    pipeline = load_pipeline()
    source, sink = topic_name("events"), topic_name("activity")
    client.create_topic(source, partitions=2)
    client.create_topic(sink, partitions=2)
    expected: Counter = Counter()
    expected_bytes: Counter = Counter()
    since_ms = START_MS + 2 * MINUTE_MS
    for partition in range(2):
        records = []
        for i in range(120):  # one record every 2.5 s: five minutes
            timestamp = START_MS + i * 2_500
            key = f"user-{(i * 7 + partition) % 3}"
            value = b"e" * (i % 9)
            records.append(ProducerRecord(value, key=key.encode(), timestamp_ms=timestamp))
            if timestamp >= since_ms:  # records are in time order in each partition
                minute = timestamp // MINUTE_MS * MINUTE_MS
                expected[(key, minute)] += 1
                expected_bytes[(key, minute)] += len(value)
        client.produce(source, partition, records)

    written = pipeline.run(spark, server.target, source, sink, since_ms)
    assert written == len(expected)
    got = {}
    for partition in range(2):
        result = client.fetch_by_offset(sink, partition, 0, fetch_format=FetchFormat.RECORD_BATCHES)
        for batch in decode_fetched(sink, partition, result.record_batches, 0,
                                    result.high_watermark):
            for record in batch.records:
                row = json.loads(record.value)
                assert record.key == row["key"].encode()
                minute = (int(record.timestamp) // MINUTE_MS) * MINUTE_MS
                got[(row["key"], minute)] = (row["records"], row["bytes"])
    assert got == {k: (expected[k], expected_bytes[k]) for k in expected}
