"""Phase ``restarted`` of make docker-test: a new container on the volume of the first one.

The first container was stopped with ``docker stop`` (SIGTERM) and the script checked the
clean-shutdown marker in the volume; this one must serve every record the first wrote, with
the same offsets, timestamps, keys, values and headers, and the same topic configs, and keep
appending where the log ended.

The tests run in file order (pytest's): the appending test comes last, after the ones that check
the log is exactly what the first phase left.
"""

from __future__ import annotations

from stratalog.client import EARLIEST, LATEST, MAX_TIMESTAMP, Client, Consumer, SyncClient


def test_topics_and_configs_survived(client: SyncClient, dataset) -> None:
    topics = {t.name: t for t in client.list_topics()}
    assert set(topics) == {dataset.events_topic, dataset.keyed_topic, dataset.kafka_topic}
    events = topics[dataset.events_topic]
    assert events.num_partitions == dataset.partitions
    assert events.configs["retention.ms"] == "-1"
    assert events.configs["segment.bytes"] == str(dataset.segment_bytes)
    for p in events.partitions:
        assert (p.log_start_offset, p.log_end_offset) == (0, dataset.record_count(p.partition))
    assert events.partitions[0].segment_count >= 3
    assert topics[dataset.keyed_topic].num_partitions == dataset.keyed_partitions


def test_every_record_survived(client: SyncClient, dataset, read_partition) -> None:
    for partition in range(dataset.partitions):
        records = read_partition(client, dataset.events_topic, partition)
        assert dataset.observed(records) == dataset.expected(partition), partition
    written_by_kafka = read_partition(client, dataset.kafka_topic, 0)
    assert [r.value for r in written_by_kafka] == [
        f"v{i}".encode() for i in range(dataset.kafka_records)]


async def test_every_keyed_record_survived(target: str, dataset) -> None:
    pairs = dataset.keyed()
    async with Consumer(target, dataset.keyed_topic, start="earliest") as consumer:
        consumed = [record async for record in consumer]
    assert sorted((r.key, r.value) for r in consumed) == sorted(pairs)
    for key in {k for k, _ in pairs}:
        assert [r.value for r in consumed if r.key == key] == [v for k, v in pairs if k == key]


def test_offset_and_timestamp_lookups_after_restart(client: SyncClient, dataset) -> None:
    topic = dataset.events_topic
    for partition in range(dataset.partitions):
        count = dataset.record_count(partition)
        assert client.list_offsets(topic, partition, EARLIEST).offset == 0
        assert client.list_offsets(topic, partition, LATEST).offset == count
        assert tuple(client.list_offsets(topic, partition, MAX_TIMESTAMP)) == (
            count - 1, dataset.timestamp_ms(count - 1)
        )
        for wanted in (0, 1, count // 3, count - 1):
            found = client.list_offsets(topic, partition, dataset.timestamp_ms(wanted) - 3)
            assert tuple(found) == (wanted, dataset.timestamp_ms(wanted))
            fetched = client.fetch_by_timestamp(topic, partition, dataset.timestamp_ms(wanted))
            assert fetched.matched_offset == wanted
            assert fetched.records[0].offset == wanted


async def test_appends_continue_where_the_log_ended(target: str, dataset) -> None:
    topic, partition = dataset.events_topic, 1
    count = dataset.record_count(partition)
    async with Client(target, timeout_s=30) as client:
        result = await client.produce(topic, partition, [b"after-restart"], flush=True)
        assert (result.base_offset, result.last_offset) == (count, count)
        fetched = await client.fetch_by_offset(topic, partition, count)
        assert [(r.offset, r.value) for r in fetched.records] == [(count, b"after-restart")]
        assert fetched.high_watermark == count + 1
