"""Batch writes through Spark, read back with the client (and the other way round)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from stratalog.client import FetchFormat, SyncClient, decode_fetched, partition_for_key
from stratalog.spark import OptionError, SchemaError, StratalogDataSource

WRITE_SCHEMA = StructType([
    StructField("value", StringType()),
    StructField("key", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
    ]))),
    StructField("timestamp", TimestampType()),
    StructField("ignored", LongType()),
])


def read_topic(client: SyncClient, topic: str) -> list[tuple]:
    """(partition, offset, key, value, timestamp, headers) of every record of ``topic``."""
    out = []
    for info in client.describe_topic(topic).partitions:
        offset = 0
        while offset < info.log_end_offset:
            result = client.fetch_by_offset(topic, info.partition, offset,
                                            fetch_format=FetchFormat.RECORD_BATCHES)
            batches = decode_fetched(topic, info.partition, result.record_batches, offset,
                                     result.high_watermark)
            for batch in batches:
                out.extend((info.partition, r.offset, r.key, r.value, r.timestamp, r.headers)
                           for r in batch.records)
            offset = batches[-1].next_offset
    return out


def test_batch_write_with_every_column(spark, client, server, topic_name):
    first, second = topic_name("a"), topic_name("b")
    client.create_topic(first, partitions=3)
    client.create_topic(second, partitions=2)
    rows = []
    for i in range(40):
        rows.append((
            None if i == 7 else f"value-{i}",
            None if i % 4 == 0 else f"key-{i % 6}".encode(),
            first if i % 2 else second,
            (i % 2) if i % 5 == 0 else None,
            [("trace", f"{i}".encode()), ("empty", None)] if i % 3 == 0 else [],
            None if i % 9 == 0 else datetime(2024, 1, 1, 0, 0, i % 60, tzinfo=UTC),
            i,
        ))
    df = spark.createDataFrame(rows, WRITE_SCHEMA).repartition(2)
    df.write.format("stratalog").mode("append").option("target", server.target).save()

    written = {topic: read_topic(client, topic) for topic in (first, second)}
    assert sum(len(v) for v in written.values()) == 40
    by_value: dict[bytes | None, tuple] = {}
    for topic, records in written.items():
        for partition, _, key, value, timestamp, headers in records:
            by_value[value] = (topic, partition, key, timestamp, headers)
    base = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000)
    for value, key, topic, partition, headers, moment, i in rows:
        got_topic, got_partition, got_key, got_timestamp, got_headers = by_value[
            value.encode() if value is not None else None
        ]
        assert (got_topic, got_key) == (topic, key)
        assert list(got_headers) == headers
        if partition is not None:
            assert got_partition == partition
        elif key is not None:  # Kafka's partitioner: murmur2 of the key
            assert got_partition == partition_for_key(key, 3 if topic == first else 2)
        if moment is not None:
            assert got_timestamp == base + (i % 60) * 1000
        else:
            assert got_timestamp > base  # now, as the Producer stamps it


def test_spark_write_then_spark_read(spark, client, server, topic_name):
    topic = topic_name()
    client.create_topic(topic, partitions=2)
    df = spark.range(0, 500).selectExpr(
        "cast(id % 10 as string) as key", "cast(concat('v', id) as binary) as value"
    )
    (df.write.format("stratalog").mode("append").option("target", server.target)
     .option("topic", topic).option("compression", "zstd").save())
    back = (spark.read.format("stratalog").option("target", server.target)
            .option("subscribe", topic).load())
    rows = back.collect()
    got = sorted((r["key"], r["value"]) for r in rows)
    assert got == sorted((str(i % 10).encode(), f"v{i}".encode()) for i in range(500))
    # Keys map to partitions as a Kafka producer maps them.
    for row in rows:
        assert row["partition"] == partition_for_key(row["key"], 2)


def test_topic_option_wins_over_the_column(spark, client, server, topic_name):
    target, ignored = topic_name("target"), topic_name("ignored")
    client.create_topic(target, partitions=1)
    df = spark.createDataFrame([(b"x", ignored)], "value binary, topic string")
    (df.write.format("stratalog").mode("append").option("target", server.target)
     .option("topic", target).save())
    assert [r[3] for r in read_topic(client, target)] == [b"x"]


@pytest.mark.parametrize(
    ("ddl", "options", "mode", "message"),
    [
        ("key binary", {"topic": "t"}, "append", "has no 'value' column"),
        ("value binary", {}, "append", "option 'topic': is required"),
        ("value binary", {"topic": "t"}, "overwrite", "option 'mode': only 'append'"),
    ],
)
def test_bad_writes_fail_with_a_clear_message(spark, server, ddl, options, mode, message):
    df = spark.createDataFrame([], ddl)
    writer = df.write.format("stratalog").mode(mode).option("target", server.target)
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception, match=message):
        writer.save()


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("value int", {"topic": "t"}, "column 'value' must be of type binary or string, got int"),
        ("value binary, key int", {"topic": "t"}, "column 'key' must be of type binary or string"),
        ("value binary, topic binary", {}, "column 'topic' must be of type string"),
        ("value binary, partition long", {"topic": "t"}, "column 'partition' must be of type int"),
        ("value binary, headers array<string>", {"topic": "t"},
         r"column 'headers' must be of type array<struct<key:string,value:binary>>"),
        ("value binary, timestamp long", {"topic": "t"}, "column 'timestamp' must be of type "
         "timestamp"),
        ("value binary", {"topic": "t", "compression": "brotli"},
         "option 'compression': must be one of"),
    ],
)
def test_write_schema_and_options_checked_by_the_source(ddl, options, message):
    """What Spark asks the source when a write starts (the Spark-level tests above show that
    these messages reach the user)."""
    source = StratalogDataSource({"target": "127.0.0.1:1", **options})
    with pytest.raises((SchemaError, OptionError), match=message):
        source.writer(_parse_ddl(ddl), overwrite=False)


_TYPES = {
    "int": IntegerType(), "long": LongType(), "binary": BinaryType(), "string": StringType(),
    "timestamp": TimestampType(), "array<string>": ArrayType(StringType()),
}


def _parse_ddl(ddl: str) -> StructType:
    """``"name type, ..."`` as a StructType (Spark's own parser needs a running session)."""
    fields = []
    for part in ddl.split(", "):
        name, type_name = part.split(" ", 1)
        fields.append(StructField(name, _TYPES[type_name]))
    return StructType(fields)


def test_undeliverable_records_fail_the_write(spark, server, topic_name):
    # A 'topic' column is known only row by row: its topics are found missing by the tasks.
    df = spark.createDataFrame([(b"x", topic_name("missing"))], "value binary, topic string")
    with pytest.raises(Exception, match=r"UnknownTopicOrPartitionError"):
        df.write.format("stratalog").mode("append").option("target", server.target).save()


def test_a_missing_sink_topic_fails_on_the_driver_or_is_created(spark, client, server, topic_name):
    """Issue 15: the sink topic is checked before any task runs: missing, the write fails with
    one message naming it (not after the job, in every task); createTopic creates it."""
    missing = topic_name("missing")
    df = spark.createDataFrame([(b"x",), (b"y",)], "value binary")
    writer = df.write.format("stratalog").mode("append").option("target", server.target)
    with pytest.raises(Exception, match=(
        f"option 'topic': topic '{missing}' does not exist on {server.target}: create it first "
        rf"\(stratalog topics create {missing} --partitions N\) or set createTopic=true"
    )):
        writer.option("topic", missing).save()
    assert missing not in {t.name for t in client.list_topics()}

    created = topic_name("created")
    (writer.option("topic", created).option("createTopic", "true")
     .option("createTopicPartitions", "4").save())
    assert client.describe_topic(created).num_partitions == 4
    assert sorted(r[3] for r in read_topic(client, created)) == [b"x", b"y"]
    # An existing topic is written as it is (its partitions are not changed).
    writer.option("topic", created).option("createTopic", "true").save()
    assert client.describe_topic(created).num_partitions == 4
    assert len(read_topic(client, created)) == 4
