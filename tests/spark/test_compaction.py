"""A compacted topic read through Spark (issue 16): after a cleaning, the rows are exactly the
surviving records, each key with its latest value, and ranges split over the holes the cleaning
left read each survivor once."""

from __future__ import annotations

from stratalog.client import ProducerRecord

BASE_TS = 1_700_000_000_000
KEYS = 10_000
ROUNDS = 10
PARTITIONS = 2
CHUNK = 2_500


def _value(k: int, round_number: int) -> bytes:
    return b"v-%05d-%d" % (k, round_number)


def test_a_compacted_topic_reads_as_its_latest_values(spark, client, server, topic_name):
    topic = topic_name()
    # segment.ms 5 s: the sentinel, a minute later than the rest, rolls the segment so that
    # everything else is cleanable (the active segment never is).
    client.create_topic(topic, partitions=PARTITIONS, configs={
        "cleanup.policy": "compact", "segment.ms": "5000", "segment.bytes": str(256 << 10)})
    for partition in range(PARTITIONS):
        for round_number in range(ROUNDS):
            records = [ProducerRecord(_value(k, round_number), b"k-%05d" % k,
                                      BASE_TS + round_number)
                       for k in range(partition, KEYS, PARTITIONS)]
            for start in range(0, len(records), CHUNK):
                client.produce(topic, partition, records[start : start + CHUNK])
        client.produce(topic, partition,
                       [ProducerRecord(b"sentinel", b"sentinel", BASE_TS + 60_000)])
        result = client.clean_partition(topic, partition, timeout_s=600)
        assert result.records_kept == KEYS // PARTITIONS

    def load(**options: str):
        builder = spark.read.format("stratalog").option("target", server.target) \
            .option("subscribe", topic)
        for name, value in options.items():
            builder = builder.option(name, value)
        return builder.load()

    rows = load().select("partition", "offset", "key", "value").collect()
    assert len(rows) == KEYS + PARTITIONS
    latest = {bytes(r["key"]): bytes(r["value"]) for r in rows}
    assert len(latest) == KEYS + 1
    for k in range(KEYS):
        assert latest[b"k-%05d" % k] == _value(k, ROUNDS - 1), k
    # Offsets kept: each survivor is where it was written (round 9 of its partition).
    per_partition = KEYS // PARTITIONS
    for r in rows:
        if r["key"] != b"sentinel":
            k = int(bytes(r["key"])[2:])
            assert r["offset"] == (ROUNDS - 1) * per_partition + k // PARTITIONS

    # Many small ranges, most of them wholly inside holes: still each survivor once.
    split = load(minPartitions="64").groupBy("partition").count().collect()
    assert {r["partition"]: r["count"] for r in split} == {
        p: per_partition + 1 for p in range(PARTITIONS)}
    # From a removed offset on: the rows start at the next survivor.
    start = f'{{"{topic}":{{"0":5,"1":5}}}}'
    counted = load(startingOffsets=start).count()
    assert counted == KEYS + PARTITIONS
