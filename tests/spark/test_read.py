"""Batch reads through Spark against the live server: rows, bounds, splitting, errors."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from stratalog.client import FetchFormat, ProducerRecord, SyncClient, decode_fetched
from stratalog.spark import DataLossError, OptionError, read_schema
from stratalog.spark.batch_reader import StratalogBatchReader
from stratalog.spark.options import parse_read_options
from stratalog.spark.ranges import OffsetRange, split_ranges
from stratalog.spark.server_read import RangePartition, read_range

BASE_TS = 1_700_000_000_000


def client_rows(client: SyncClient, topic: str, partitions: int) -> list[tuple]:
    """Every record of ``topic`` as the client reads it: (partition, offset, key, value, ts,
    headers), in partition and offset order."""
    rows = []
    for partition in range(partitions):
        offset = 0
        while True:
            result = client.fetch_by_offset(
                topic, partition, offset, fetch_format=FetchFormat.RECORD_BATCHES
            )
            batches = decode_fetched(topic, partition, result.record_batches, offset,
                                     result.high_watermark)
            if not batches:
                break
            for batch in batches:
                for r in batch.records:
                    rows.append((partition, r.offset, r.key, r.value, r.timestamp,
                                 [(k, v) for k, v in r.headers]))
            offset = batches[-1].next_offset
            if offset >= result.high_watermark:
                break
    return rows


EPOCH = datetime(1970, 1, 1)


def to_ms(moment: datetime) -> int:
    """A timestamp column's value (naive, in the session's UTC) in ms since the epoch."""
    return (moment - EPOCH) // timedelta(milliseconds=1)


def spark_rows(rows: list, with_headers: bool) -> list[tuple]:
    """(partition, offset, key, value, timestamp ms, headers) of every Row, in order."""
    out = []
    for row in rows:
        headers = [(h["key"], h["value"]) for h in row["headers"]] if with_headers else []
        out.append((row["partition"], row["offset"], row["key"], row["value"],
                    to_ms(row["timestamp"]), headers))
    return sorted(out, key=lambda r: (r[0], r[1]))  # sorted here: orderBy costs a shuffle


def produce_varied(client: SyncClient, topic: str, partitions: int, per_partition: int) -> None:
    """Keys, null keys, null values, empty values, headers, varied timestamps."""
    for partition in range(partitions):
        records = []
        for i in range(per_partition):
            key = None if i % 5 == 0 else f"k{i % 7}".encode()
            value = None if i % 11 == 3 else (b"" if i % 13 == 4 else f"v{partition}-{i}".encode())
            headers = [("h", f"{i}".encode()), ("n", None)] if i % 3 == 0 else []
            records.append(ProducerRecord(value, key=key, timestamp_ms=BASE_TS + i * 1000,
                                          headers=headers))
        # Several produce calls: several batches per partition.
        for start in range(0, per_partition, 17):
            client.produce(topic, partition, records[start : start + 17])


def reader(server, **options: str):
    def load(spark):
        builder = spark.read.format("stratalog").option("target", server.target)
        for name, value in options.items():
            builder = builder.option(name, value)
        return builder.load()

    return load


def test_batch_read_equals_client_read(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=3)
    produce_varied(client, topic, 3, 40)
    df = reader(server, subscribe=topic, includeHeaders="true")(spark)
    assert df.schema == read_schema(True)
    rows = df.collect()
    assert spark_rows(rows, with_headers=True) == client_rows(client, topic, 3)
    assert {r["topic"] for r in rows} == {topic}
    assert {r["timestampType"] for r in rows} == {0}


def test_schema_without_headers_and_log_append_time(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=1, configs={"message.timestamp.type": "LogAppendTime"})
    client.produce(topic, 0, [ProducerRecord(b"x", timestamp_ms=5), ProducerRecord(b"y")])
    df = reader(server, subscribe=topic)(spark)
    assert df.schema == read_schema(False)
    rows = df.collect()
    assert [r["timestampType"] for r in rows] == [1, 1]
    # LogAppendTime: both records carry the broker's append time, not 5 ms.
    assert rows[0]["timestamp"] == rows[1]["timestamp"]
    assert rows[0]["timestamp"].year >= 2024


def test_assign_pattern_and_offsets_json(spark, client, server, topic_name):
    a, b = topic_name("a"), topic_name("b")
    for topic in (a, b):
        client.create_topic(topic, partitions=2)
        for partition in range(2):
            client.produce(topic, partition, [f"{topic}-{partition}-{i}".encode()
                                              for i in range(10)])
    assigned = reader(server, assign=f'{{"{a}":[1]}}')(spark)
    assert [(r["partition"], r["offset"]) for r in assigned.collect()] == [(1, i) for i in range(10)]
    pattern = reader(server, subscribePattern=a[:-2] + ".*", endingOffsets="latest")(spark)
    assert {r["topic"] for r in pattern.select("topic").collect()} == {a}
    ranged = reader(
        server, subscribe=f"{a},{b}",
        startingOffsets=f'{{"{a}":{{"0":3,"1":-2}},"{b}":{{"0":9,"1":0}}}}',
        endingOffsets=f'{{"{a}":{{"0":5,"1":-1}},"{b}":{{"0":10,"1":1}}}}',
    )(spark)
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in ranged.collect())
    want = sorted(
        [(a, 0, 3), (a, 0, 4)] + [(a, 1, i) for i in range(10)] + [(b, 0, 9), (b, 1, 0)]
    )
    assert got == want


def test_timestamp_bounds_equal_list_offsets(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    produce_varied(client, topic, 2, 30)
    start_ts, end_ts = BASE_TS + 7_500, BASE_TS + 21_000
    expected = []
    for partition in range(2):
        first = client.list_offsets(topic, partition, start_ts).offset
        last = client.list_offsets(topic, partition, end_ts).offset
        expected += [(partition, o) for o in range(first, last)]
    assert expected  # the bounds select something
    df = reader(server, subscribe=topic, startingTimestamp=str(start_ts),
                endingTimestamp=str(end_ts))(spark)
    assert sorted((r["partition"], r["offset"]) for r in df.collect()) == expected
    # Per-partition timestamps, and the precedence: startingTimestamp wins over the others.
    by_partition = reader(
        server, subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{start_ts},"1":{BASE_TS}}}}}',
        startingOffsets="earliest",
    )(spark)
    first0 = client.list_offsets(topic, 0, start_ts).offset
    firsts = {}
    for r in by_partition.select("partition", "offset").collect():
        firsts[r[0]] = min(firsts.get(r[0], r[1]), r[1])
    assert firsts == {0: first0, 1: 0}
    precedence = reader(
        server, subscribe=topic, startingTimestamp=str(start_ts),
        startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{BASE_TS},"1":{BASE_TS}}}}}',
    )(spark)
    assert precedence.count() == sum(
        30 - client.list_offsets(topic, p, start_ts).offset for p in range(2)
    )


def test_start_timestamp_without_match(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    client.produce(topic, 0, [ProducerRecord(b"old", timestamp_ms=BASE_TS)])
    future = str(BASE_TS + 10_000_000)
    with pytest.raises(Exception, match=r"startingTimestamp.*no record of .* has a timestamp"):
        reader(server, subscribe=topic, startingTimestamp=future)(spark).collect()
    latest = reader(server, subscribe=topic, startingTimestamp=future,
                    startingOffsetsByTimestampStrategy="latest")(spark)
    assert latest.count() == 0


def test_range_splitting_gives_the_same_rows(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    for partition, count in ((0, 100), (1, 7)):
        client.produce(topic, partition, [f"{partition}-{i}".encode() for i in range(count)])
    whole = reader(server, subscribe=topic)(spark)
    assert whole.rdd.getNumPartitions() == 2
    baseline = sorted((r["partition"], r["offset"], r["value"]) for r in whole.collect())
    for options, tasks in (
        ({"minPartitions": "5"}, split_ranges(
            [OffsetRange(topic, 0, 0, 100), OffsetRange(topic, 1, 0, 7)], min_partitions=5)),
        ({"maxRecordsPerPartition": "30"}, split_ranges(
            [OffsetRange(topic, 0, 0, 100), OffsetRange(topic, 1, 0, 7)],
            max_records_per_partition=30)),
    ):
        df = reader(server, subscribe=topic, **options)(spark)
        assert df.rdd.getNumPartitions() == len(tasks) > 2
        assert sorted((r["partition"], r["offset"], r["value"]) for r in df.collect()) == baseline


def test_read_yields_arrow_batches_of_the_exact_schema(client, server, topic_name):
    """read() without Spark: the batches Spark gets, checked against pyspark's conversion."""
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    client.produce(topic, 0, [ProducerRecord(b"v", key=b"k", headers=[("a", b"1")])] * 3)
    for include_headers in (False, True):
        options = parse_read_options(
            {"target": server.target, "subscribe": topic,
             "includeHeaders": str(include_headers).lower()},
            streaming=False,
        )
        batch_reader = StratalogBatchReader(options)
        batches = [b for p in batch_reader.partitions() for b in batch_reader.read(p)]
        expected = to_arrow_schema(read_schema(include_headers), timezone="UTC")
        assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
        assert all(b.schema.equals(expected) for b in batches)
        assert sum(b.num_rows for b in batches) == 3


def test_data_loss_after_retention(spark, client, server, topic_name):
    """Retention deleted segments holding records the query asks for."""
    topic = topic_name()
    client.create_topic(topic, partitions=1, configs={
        "segment.bytes": "2048", "retention.ms": "60000", "file.delete.delay.ms": "0",
    })
    # Old timestamps: their segments expire at once. The last records are recent, so the
    # segment holding them stays and the log start settles.
    for i in range(20):
        client.produce(topic, 0, [ProducerRecord(b"x" * 200, timestamp_ms=BASE_TS + i)] * 3)
    client.produce(topic, 0, [b"recent"] * 3)
    deadline = time.monotonic() + 60
    while client.describe_topic(topic).partitions[0].segment_count > 1:
        assert time.monotonic() < deadline, "retention did not delete the old segments"
        time.sleep(0.1)
    log_start = client.describe_topic(topic).partitions[0].log_start_offset
    assert 0 < log_start <= 60
    starting = f'{{"{topic}":{{"0":0}}}}'
    with pytest.raises(Exception, match="failOnDataLoss=false") as caught:
        reader(server, subscribe=topic, startingOffsets=starting)(spark).collect()
    assert "no longer in the log" in str(caught.value)
    df = reader(server, subscribe=topic, startingOffsets=starting, failOnDataLoss="false")(spark)
    offsets = sorted(r["offset"] for r in df.collect())
    assert offsets == list(range(log_start, 63))
    # The task-side check too: a range planned before the records went away.
    options = parse_read_options(
        {"target": server.target, "subscribe": topic}, streaming=False
    )
    lost = RangePartition(OffsetRange(topic, 0, 0, 63), options.connection,
                          include_headers=False, fail_on_data_loss=True,
                          fetch_max_bytes=1 << 20, isolation_level=options.isolation_level)
    with pytest.raises(DataLossError, match=f"offsets 0..{log_start - 1} of {topic}-0"):
        list(read_range(lost))
    skipped = RangePartition(OffsetRange(topic, 0, 0, 63), options.connection,
                             include_headers=False, fail_on_data_loss=False,
                             fetch_max_bytes=1 << 20, isolation_level=options.isolation_level)
    got = [o for b in read_range(skipped) for o in b.column("offset").to_pylist()]
    assert got == list(range(log_start, 63))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "{topic}", "assign": '{{"{topic}":[0]}}'},
         "option 'assign': only one of 'subscribe', 'subscribePattern' and 'assign'"),
        ({"subscribe": "no-such-topic-anywhere"},
         "option 'subscribe': topic 'no-such-topic-anywhere' does not exist"),
        ({"subscribe": "{topic}", "startingOffsets": '{{"{topic}":{{"0":1}}'},
         "option 'startingOffsets': is not valid JSON"),
    ],
)
def test_bad_options_fail_the_query_naming_the_option(
    spark, client, server, topic_name, options, message
):
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    client.produce(topic, 0, [b"a", b"b"])
    formatted = {k: v.format(topic=topic) for k, v in options.items()}
    with pytest.raises(Exception, match=message):
        reader(server, **formatted)(spark).collect()


def test_user_schema_is_refused(spark, server):
    with pytest.raises(Exception, match="fixed schema"):
        (spark.read.format("stratalog").schema("value binary")
         .option("target", server.target).option("subscribe", "x").load().collect())


def test_option_errors_found_at_planning(client, server, topic_name):
    """Errors that need the server's answer, from the planner (no Spark: the same code runs in
    Spark's planner process; the Spark-level tests above show such messages reach the user)."""
    topic = topic_name()
    client.create_topic(topic, partitions=1)
    client.produce(topic, 0, [b"a", b"b"])

    def plan(**options: str) -> None:
        StratalogBatchReader(parse_read_options(
            {"target": server.target, "subscribe": topic, **options}, streaming=False
        )).partitions()

    with pytest.raises(OptionError, match=r"option 'endingOffsets': offset 99 of .* is past "
                                          "its log end offset 2"):
        plan(endingOffsets=f'{{"{topic}":{{"0":99}}}}')
    with pytest.raises(OptionError, match=r"option 'startingOffsets': starting offset 2 of .* "
                                          "is after its ending offset 1"):
        plan(startingOffsets=f'{{"{topic}":{{"0":2}}}}', endingOffsets=f'{{"{topic}":{{"0":1}}}}')
    with pytest.raises(OptionError, match=r"option 'startingOffsets': must name every partition"
                                          ".*no entry for .*-0"):
        plan(startingOffsets='{"other":{"0":0}}')
    with pytest.raises(OptionError, match=r"option 'assign': partition 3 of topic .* does not "
                                          r"exist \(the topic has 1 partitions\)"):
        StratalogBatchReader(parse_read_options(
            {"target": server.target, "assign": f'{{"{topic}":[3]}}'}, streaming=False
        )).partitions()
    with pytest.raises(OptionError, match="option 'target': is required"):
        parse_read_options({"subscribe": "t"}, streaming=False)
    with pytest.raises(OptionError, match="option 'subscribe': one of"):
        parse_read_options({"target": "h:1"}, streaming=False)


def test_a_target_list_with_the_first_dead_reads_through_the_library(client, server, topic_name):
    """target as kafka.bootstrap.servers: a list; the reads go through the client library,
    which skips the server that does not answer and reads each partition from its leader."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    for partition in (0, 1):
        client.produce(topic, partition, [ProducerRecord(b"p%d" % partition)] * 2)
    options = parse_read_options(
        {"target": f"{dead},{server.target}", "subscribe": topic}, streaming=False
    )
    batch_reader = StratalogBatchReader(options)
    batches = [b for p in batch_reader.partitions() for b in batch_reader.read(p)]
    values = sorted(v for b in batches for v in b.column("value").to_pylist())
    assert values == [b"p0", b"p0", b"p1", b"p1"]
