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


def _sink_rows(client, sink):
    rows = []
    for partition in range(client.describe_topic(sink).num_partitions):
        result = client.fetch_by_offset(sink, partition, 0)
        rows += [json.loads(r.value) for r in result.records]
    return rows


def test_empty_partition_and_missing_sink(spark, client, server, topic_name):
    """Issue 15: a partition with no record after the start (here an empty one) reads nothing
    instead of failing the job, and the sink is created by the writer (createTopic)."""
    pipeline = load_pipeline()
    source, sink = topic_name("events"), topic_name("activity")
    client.create_topic(source, partitions=3)  # partition 2 stays empty
    for partition in range(2):
        client.produce(source, partition, [
            ProducerRecord(b"x" * 5, key=b"user-1", timestamp_ms=START_MS + i * 1_000)
            for i in range(30)
        ])
    read = pipeline.read_options(server.target, source, START_MS)
    write = pipeline.write_options(server.target, sink, 2)
    assert pipeline.check(read, write) == 60
    assert client.describe_topic(sink).num_partitions == 2  # the driver created it
    written = pipeline.run(spark, server.target, source, sink, START_MS, sink_partitions=2)
    assert written == 1
    assert _sink_rows(client, sink) == [
        {"key": "user-1", "minute": "2025-11-22T08:27:00.000Z", "records": 60, "bytes": 300}
    ]


def test_strategy_error_and_missing_source_are_one_line(client, server, topic_name, capsys):
    """User errors stop the example on the driver, before Spark starts, with one line."""
    pipeline = load_pipeline()
    source = topic_name("events")
    client.create_topic(source, partitions=2)
    client.produce(source, 0, [ProducerRecord(b"v", timestamp_ms=START_MS)])
    args = ["--target", server.target, "--source", source, "--since-ms", str(START_MS),
            "--sink", topic_name("sink")]
    assert pipeline.main([*args, "--starting-strategy", "error"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"pipeline: option 'startingTimestamp': no record of {source}-1 has a timestamp >= "
        f"{START_MS} ms; set startingOffsetsByTimestampStrategy=latest to start such "
        "partitions at their end instead\n"
    )
    assert pipeline.main(["--target", server.target, "--source", "no-such-topic"]) == 1
    err = capsys.readouterr().err
    assert err == (f"pipeline: option 'subscribe': topic 'no-such-topic' does not exist on "
                   f"{server.target}\n")


def test_a_stratalog_error_inside_a_spark_exception_is_one_line():
    """Errors met while the job runs reach the driver wrapped in Spark's exception, after a
    Python traceback; the example prints only stratalog's line of it."""
    from pyspark.errors import PySparkException

    pipeline = load_pipeline()
    wrapped = PySparkException(message=(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to plan: Traceback (most recent call last):\n"
        '  File "spark/offsets.py", line 233, in resolve_offsets\n'
        "stratalog.spark.errors.DataLossError: offsets [0, 5) of t-0 are gone. Set the option "
        "failOnDataLoss=false to skip them.\n SQLSTATE: 38000"
    ))
    assert pipeline._one_line(wrapped) == (
        "DataLossError: offsets [0, 5) of t-0 are gone. Set the option failOnDataLoss=false "
        "to skip them."
    )
    other = PySparkException(message="Traceback ...\nValueError: a bug of the job's own\n")
    assert pipeline._one_line(other) is None
