"""Streaming reads and writes: offsets, limits, AvailableNow, restarts from a checkpoint."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql.functions import col, upper
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from stratalog.client import FetchFormat, SyncClient, decode_fetched
from stratalog.spark import DataLossError
from stratalog.spark.options import parse_read_options
from stratalog.spark.server_read import RangePartition
from stratalog.spark.stream_reader import StratalogStreamReader

QUERY_TIMEOUT_S = 240


def read_all(client: SyncClient, topic: str, partition: int) -> list:
    records, offset = [], 0
    while True:
        result = client.fetch_by_offset(topic, partition, offset,
                                        fetch_format=FetchFormat.RECORD_BATCHES)
        batches = decode_fetched(topic, partition, result.record_batches, offset,
                                 result.high_watermark)
        for batch in batches:
            records.extend(batch.records)
        if not batches or batches[-1].next_offset >= result.high_watermark:
            return records
        offset = batches[-1].next_offset


def stream_reader(server, **options: str) -> StratalogStreamReader:
    return StratalogStreamReader(
        parse_read_options({"target": server.target, **options}, streaming=True)
    )


def run_available_now(spark, server, topic: str, output: str, checkpoint: str,
                      **options: str) -> list:
    """One AvailableNow run into a parquet sink; returns the query's progress reports."""
    builder = spark.readStream.format("stratalog").option("target", server.target)
    builder = builder.option("subscribe", topic)
    for name, value in options.items():
        builder = builder.option(name, value)
    query = (
        builder.load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not finish"
    assert query.exception() is None
    return query.recentProgress


def test_available_now_restart_reads_exactly_the_new_records(
    spark, client, server, topic_name, tmp_path
):
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    for partition in range(2):
        client.produce(topic, partition, [f"a{partition}-{i}".encode() for i in range(30)])
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    progress = run_available_now(
        spark, server, topic, output, checkpoint,
        startingOffsets="earliest", maxOffsetsPerTrigger="25", minOffsetsPerTrigger="5",
    )
    # 60 records, at most 25 per micro-batch: at least three micro-batches.
    batches = [p for p in progress if p["numInputRows"] > 0]
    assert len(batches) >= 3
    assert all(p["numInputRows"] <= 26 for p in batches)  # prorating rounds up small shares
    first = sorted((r[0], r[1]) for r in spark.read.parquet(output).collect())
    assert first == sorted((p, o) for p in range(2) for o in range(30))
    # The offsets Spark checkpoints are Kafka's JSON: {"topic": {"partition": next_offset}}.
    assert json.loads(progress[-1]["sources"][0]["endOffset"]) == {topic: {"0": 30, "1": 30}}

    # The topic grows; the restarted query goes on from its checkpoint ("latest" would read
    # nothing if the start options were used instead).
    for partition in range(2):
        client.produce(topic, partition, [f"b{partition}-{i}".encode() for i in range(20)])
    run_available_now(spark, server, topic, output, checkpoint, startingOffsets="latest")
    rows = [(r[0], r[1], r[2]) for r in spark.read.parquet(output).collect()]
    assert len(rows) == 100  # no record twice, none missing
    assert sorted((p, o) for p, o, _ in rows) == sorted(
        (p, o) for p in range(2) for o in range(50)
    )
    by_offset = {(p, o): v for p, o, v in rows}
    assert by_offset[(1, 30)] == b"b1-0" and by_offset[(0, 29)] == b"a0-29"


def test_streaming_write_round_trip(spark, client, server, topic_name, tmp_path):
    source, sink = topic_name("in"), topic_name("out")
    client.create_topic(source, partitions=2)
    client.create_topic(sink, partitions=3)
    for partition in range(2):
        client.produce(source, partition, [f"p{partition}-{i}".encode() for i in range(25)])
    query = (
        spark.readStream.format("stratalog")
        .option("target", server.target).option("subscribe", source)
        .option("startingOffsets", "earliest").load()
        .select(col("value").cast("string").alias("key"), upper(col("value").cast("string"))
                .alias("value"))
        .writeStream.format("stratalog")
        .option("target", server.target).option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    written = [r for p in range(3) for r in read_all(client, sink, p)]
    assert sorted((r.key, r.value) for r in written) == sorted(
        (f"p{p}-{i}".encode(), f"P{p}-{i}".encode()) for p in range(2) for i in range(25)
    )


def test_ending_options_fail_a_stream(spark, server, topic_name, client, tmp_path):
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    with pytest.raises(Exception, match="option 'endingOffsets': is not allowed in streaming"):
        query = (
            spark.readStream.format("stratalog")
            .option("target", server.target).option("subscribe", topic)
            .option("endingOffsets", "latest").load()
            .writeStream.format("parquet").option("path", str(tmp_path / "o"))
            .option("checkpointLocation", str(tmp_path / "c"))
            .trigger(availableNow=True).start()
        )
        query.awaitTermination(QUERY_TIMEOUT_S)
        raise query.exception() or AssertionError("the query did not fail")


def test_max_offsets_per_trigger_is_prorated_by_lag(server, client, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=3)
    for partition, count in ((0, 90), (1, 10), (2, 0)):
        if count:
            client.produce(topic, partition, [b"x"] * count)
    reader = stream_reader(server, subscribe=topic, startingOffsets="earliest",
                           maxOffsetsPerTrigger="10")
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0, "2": 0}}
    # Lags 90 and 10 of 100: 9 and 1 records.
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end == {topic: {"0": 9, "1": 1, "2": 0}}
    # A share below one record rounds up, so a small partition is never starved.
    end = reader.latestOffset(end, ReadMaxRows(5))
    assert end == {topic: {"0": 13, "1": 2, "2": 0}}
    assert reader.latestOffset(end, ReadAllAvailable()) == {topic: {"0": 90, "1": 10, "2": 0}}
    # The micro-batch's tasks cover exactly [start, end).
    tasks = reader.partitions(start, {topic: {"0": 9, "1": 1, "2": 0}})
    assert all(isinstance(t, RangePartition) for t in tasks)
    assert sorted((t.offset_range.partition, t.offset_range.from_offset,
                   t.offset_range.until_offset) for t in tasks) == [(0, 0, 9), (1, 0, 1)]
    batches = [b for t in tasks for b in reader.read(t)]
    assert sum(b.num_rows for b in batches) == 10
    reader.stop()


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(server, client, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    client.produce(topic, 0, [b"x"] * 10)
    reader = stream_reader(server, subscribe=topic, startingOffsets="earliest",
                           minOffsetsPerTrigger="50", maxOffsetsPerTrigger="100",
                           maxTriggerDelay="500ms")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(50)
    start = reader.initialOffset()
    # The first micro-batch never waits (as Kafka's source: no trigger happened yet).
    first = reader.latestOffset(start, limit)
    assert first == {topic: {"0": 10}}
    client.produce(topic, 0, [b"y"] * 20)
    # 20 records are waiting, fewer than 50, and the delay has not passed: no micro-batch.
    assert reader.latestOffset(first, limit) == first
    time.sleep(0.6)  # part of what is tested: maxTriggerDelay (500 ms) passes
    # maxTriggerDelay passed: the waiting records go, capped by maxOffsetsPerTrigger.
    assert reader.latestOffset(first, limit) == {topic: {"0": 30}}
    client.produce(topic, 0, [b"z"] * 150)
    assert reader.latestOffset({topic: {"0": 30}}, limit) == {topic: {"0": 130}}
    reader.stop()


def test_available_now_target_ignores_later_records(server, client, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    client.produce(topic, 0, [b"x"] * 5)
    reader = stream_reader(server, subscribe=topic, startingOffsets="earliest",
                           minOffsetsPerTrigger="1000")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    client.produce(topic, 0, [b"later"] * 5)
    client.produce(topic, 1, [b"later"] * 5)
    # minOffsetsPerTrigger would wait forever: AvailableNow ignores it.
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {topic: {"0": 5, "1": 0}}
    assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end
    reader.stop()


def test_stream_data_loss(server, client, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    client.produce(topic, 0, [b"x"] * 5)
    reader = stream_reader(server, subscribe=topic)
    assert reader.initialOffset() == {topic: {"0": 5}}  # "latest" is a stream's default
    # Offsets that went backwards (a recreated topic).
    with pytest.raises(DataLossError, match="went back from 9 to 5"):
        reader.partitions({topic: {"0": 9}}, {topic: {"0": 5}})
    lenient = stream_reader(server, subscribe=topic, failOnDataLoss="false")
    assert lenient.partitions({topic: {"0": 9}}, {topic: {"0": 5}}) == []
    # A partition that disappeared.
    with pytest.raises(DataLossError, match=f"partitions {topic}-7 were read"):
        reader.latestOffset({topic: {"0": 5, "7": 3}}, ReadAllAvailable())
    assert lenient.latestOffset({topic: {"0": 5, "7": 3}}, ReadAllAvailable()) == {
        topic: {"0": 5}
    }
    # A new partition (a topic matching a pattern, created later) starts at its log start.
    other = topic_name("new")
    client.create_topic(other, partitions=1)
    client.produce(other, 0, [b"n"] * 3)
    pattern = stream_reader(server, subscribePattern=f"({topic}|{other})")
    end = pattern.latestOffset({topic: {"0": 5}}, ReadAllAvailable())
    assert end == {topic: {"0": 5}, other: {"0": 3}}
    tasks = pattern.partitions({topic: {"0": 5}}, end)
    assert [(t.offset_range.topic, t.offset_range.from_offset, t.offset_range.until_offset)
            for t in tasks] == [(other, 0, 3)]
    for r in (reader, lenient, pattern):
        r.stop()
