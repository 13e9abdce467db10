"""Log compaction against a live server (issue 16): CleanPartition, reads over the holes, the
cleaner's position in DescribeTopic, its metrics, the CLI.

The module's server runs with ``log.cleaner.enable=false``, so that every cleaning here is one
the test asked for (CleanPartition) and the log between two calls is exactly what the test
wrote; the background cleaner has a test of its own with a server of its own.

How a test makes everything it wrote cleanable: the active segment is never cleaned, so the
last write is a *sentinel*, a record whose timestamp is a minute past the others on a topic
with ``segment.ms`` of a few seconds: its append rolls the segment (Kafka rolls on the gap
between a record's timestamp and the first one of the segment), leaving the sentinel alone in
the active segment.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from stratalog.client import (
    Client,
    Consumer,
    FetchFormat,
    Producer,
    ProducerRecord,
    decode_fetched,
    errors,
)
from stratalog.client.wire import EARLIEST, LATEST, MAX_TIMESTAMP

from .conftest import ServerProcess, launch_server

T0 = 1_700_000_000_000
KEYS = 100_000
ROUNDS = 10
DEADLINE_S = 600
CLEAN_TIMEOUT_S = 600
# Topic configs of every compacted topic here: several segments, rolled by the sentinel.
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "5000"}

CLI = [sys.executable, "-m", "stratalog.cli"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("compaction") / "data"
    process = launch_server(data_dir, "--set", "log.cleaner.enable=false")
    yield process
    code = process.stop()
    assert code == 0, f"server exited {code} on SIGTERM; log:\n{process.log_text()[-4000:]}"


@pytest.fixture
async def client(server: ServerProcess):
    async with Client(server.target, timeout_s=60) as client:
        yield client


def _key(k: int) -> bytes:
    return b"key-%06d" % k


def _value(k: int, round_number: int) -> bytes:
    return b"value-%06d-round-%d" % (k, round_number)


async def _read_all(client: Client, topic: str) -> list:
    async def read() -> list:
        async with Consumer(client, topic, start="earliest") as consumer:
            return [record async for record in consumer]

    return await asyncio.wait_for(read(), DEADLINE_S)


async def _roll(client: Client, topic: str, key: bytes, timestamp_ms: int,
                partition: int = 0) -> int:
    """Append the sentinel: it rolls the segment and stays alone in the active one."""
    result = await client.produce(topic, partition,
                                  [ProducerRecord(b"sentinel", key, timestamp_ms)])
    return result.base_offset


# ------------------------------------------------------------------------ 100,000 keys


async def test_a_hundred_thousand_keys_updated_ten_times_keep_their_latest_values(
    client: Client, server: ServerProcess
) -> None:
    topic = "cmp-big"
    await client.create_topic(topic, 1, {**COMPACTED, "segment.bytes": str(4 << 20)})
    keys = [_key(k) for k in range(KEYS)]
    async with Producer(client, linger_ms=5) as producer:
        for round_number in range(ROUNDS):
            # One timestamp per round: a lookup by time lands on a round's first record.
            await producer.send_many(
                topic, [_value(k, round_number) for k in range(KEYS)], keys, partition=0,
                timestamps_ms=[T0 + 10 * round_number] * KEYS,
            )
        await producer.flush()
    sentinel_offset = await _roll(client, topic, b"sentinel", T0 + 60_000)
    assert sentinel_offset == KEYS * ROUNDS
    before = await client.describe_topic(topic)
    assert before.partitions[0].segment_count > 5, before
    assert before.partitions[0].cleaned_offset == 0  # compacted, never cleaned
    assert before.partitions[0].last_clean_ms == -1

    result = await client.clean_partition(topic, 0, timeout_s=CLEAN_TIMEOUT_S)
    assert (result.first_dirty_offset_before, result.end_offset) == (0, sentinel_offset)
    assert result.records_read == KEYS * ROUNDS
    assert result.records_kept == KEYS
    assert result.segments_before >= before.partitions[0].segment_count - 1
    # Segments are grouped by their sizes before cleaning (Kafka's groupSegmentsBySize): full
    # ones are rewritten one by one here, and merge at a later cleaning.
    assert 0 < result.segments_after <= result.segments_before
    assert 0 < result.bytes_written < result.bytes_read

    # Every key readable with its latest value, and only that: one record per key (and the
    # sentinel), in offset order, offsets and timestamps those they were written with.
    records = await _read_all(client, topic)
    assert len(records) == KEYS + 1
    latest = {record.key: record for record in records}
    assert len(latest) == KEYS + 1
    for k in range(KEYS):
        record = latest[keys[k]]
        assert record.value == _value(k, ROUNDS - 1)
        assert record.offset == (ROUNDS - 1) * KEYS + k
        assert record.timestamp == T0 + 10 * (ROUNDS - 1)
    offsets = [record.offset for record in records]
    assert offsets == sorted(offsets)

    # A fetch at an offset the cleaning removed: the first record it leads to is the next
    # surviving one. A fetch may answer no record but a next_offset past an empty batch (the
    # cleaner keeps the last batch of each rewritten group, emptied, as Kafka keeps a
    # producer's), which the reader follows, as a Kafka consumer does: a bounded number of
    # hops, at most one per segment.
    first_survivor = (ROUNDS - 1) * KEYS
    segments = after_clean = (await client.describe_topic(topic)).partitions[0].segment_count
    for removed in (0, 1, KEYS * 3 + 17, first_survivor - 1):
        for fetch_format in (FetchFormat.RECORDS, FetchFormat.RECORD_BATCHES):
            offset = removed
            for _ in range(segments + 1):
                fetched = await client.fetch_by_offset(topic, 0, offset, max_bytes=4096,
                                                       fetch_format=fetch_format)
                offsets = [r.offset for r in fetched.records] if fetch_format == \
                    FetchFormat.RECORDS else [
                        o for b in decode_fetched(topic, 0, fetched.record_batches, offset,
                                                  fetched.high_watermark) for o in b.offsets]
                if offsets:
                    break
                assert fetched.next_offset > offset, (removed, fetch_format)
                offset = fetched.next_offset
            assert offsets and offsets[0] == first_survivor, (removed, fetch_format, offsets)
        offset = removed
        for _ in range(segments + 1):
            point = await client.fetch_by_offset(topic, 0, offset, max_records=1)
            if point.records:
                break
            offset = point.next_offset
        assert [(r.offset, r.value) for r in point.records] == [
            (first_survivor, _value(0, ROUNDS - 1))]

    # Lookups by time over the holes: a round whose records are gone resolves to the first
    # surviving record at or after its time.
    matched = await client.list_offsets(topic, 0, T0 + 10 * 3)
    assert (matched.offset, matched.timestamp) == (first_survivor, T0 + 10 * (ROUNDS - 1))
    by_time = await client.fetch_by_timestamp(topic, 0, T0 + 10 * 3, max_bytes=4096)
    assert (by_time.matched_offset, by_time.matched_timestamp) == (
        first_survivor, T0 + 10 * (ROUNDS - 1))
    assert by_time.records[0].offset == first_survivor
    assert (await client.list_offsets(topic, 0, EARLIEST)).offset == 0  # the log start stays
    assert (await client.list_offsets(topic, 0, LATEST)).offset == sentinel_offset + 1
    assert (await client.list_offsets(topic, 0, MAX_TIMESTAMP)).offset == sentinel_offset

    # The cleaner's position, in DescribeTopic and in the metrics.
    after = (await client.describe_topic(topic)).partitions[0]
    assert after.segment_count == after_clean
    assert after.cleaned_offset == sentinel_offset
    assert after.last_clean_ms > T0
    assert after.dirty_ratio == 0.0
    assert after.size_bytes < before.partitions[0].size_bytes / 5
    labels = f'{{partition="0",topic="{topic}"}}'
    assert server.metric(f"stratalog_cleaner_cleaned_offset{labels}") == sentinel_offset
    assert server.metric(f"stratalog_cleaner_dirty_ratio{labels}") == 0.0
    assert server.metric("stratalog_cleaner_cleanings_total") >= 1
    assert server.metric("stratalog_cleaner_bytes_read_total") >= result.bytes_read
    assert server.metric("stratalog_cleaner_records_removed_total") >= KEYS * (ROUNDS - 1)


# ------------------------------------------------------------------------ tombstones


async def test_a_tombstone_hides_its_key_and_goes_after_delete_retention(client: Client) -> None:
    topic = "cmp-tombstones"
    await client.create_topic(topic, 1, COMPACTED)
    await client.produce(topic, 0, [
        ProducerRecord(b"v1", b"k1", T0), ProducerRecord(b"v2", b"k2", T0),
        ProducerRecord(None, b"k1", T0 + 1),  # the tombstone of k1
    ])
    await _roll(client, topic, b"s1", T0 + 60_000)
    await client.clean_partition(topic, 0)
    # Kept for delete.retention.ms (a day by default) after its segment was cleaned, so that a
    # reader that saw v1 also sees its deletion.
    assert [(r.key, r.value) for r in await _read_all(client, topic)] == [
        (b"k2", b"v2"), (b"k1", None), (b"s1", b"sentinel")]

    await client.alter_topic_configs(topic, {"delete.retention.ms": "0"})
    await _roll(client, topic, b"s2", T0 + 120_000)
    await client.clean_partition(topic, 0)
    assert [(r.key, r.value) for r in await _read_all(client, topic)] == [
        (b"k2", b"v2"), (b"s1", b"sentinel"), (b"s2", b"sentinel")]


# ------------------------------------------------------------------------ refusals


async def test_a_record_without_a_key_is_refused_on_a_compacted_topic(client: Client) -> None:
    await client.create_topic("cmp-keyless", 1, COMPACTED)
    with pytest.raises(errors.InvalidRecordError, match="key") as refused:
        await client.produce("cmp-keyless", 0, [ProducerRecord(b"no key", b"k"),
                                                 ProducerRecord(b"no key")])
    assert refused.value.reason == "INVALID_RECORD"
    # Nothing of the refused request was written.
    assert (await client.list_offsets("cmp-keyless", 0, LATEST)).offset == 0
    await client.produce("cmp-keyless", 0, [ProducerRecord(b"keyed", b"k")])


async def test_clean_partition_refuses_what_it_cannot_clean(client: Client) -> None:
    await client.create_topic("cmp-not-compacted", 1)
    with pytest.raises(errors.InvalidConfigError, match="cmp-not-compacted"):
        await client.clean_partition("cmp-not-compacted", 0)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        await client.clean_partition("cmp-no-such-topic", 0)
    await client.create_topic("cmp-one-partition", 1, COMPACTED)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        await client.clean_partition("cmp-one-partition", 1)
    with pytest.raises(ValueError, match="partition"):
        await client.clean_partition("cmp-one-partition", -1)
    # An empty compacted partition: nothing to clean, and that is an answer, not an error.
    empty = await client.clean_partition("cmp-one-partition", 0)
    assert (empty.records_read, empty.records_kept, empty.end_offset) == (0, 0, 0)


# ------------------------------------------------------------------------ the CLI


def _stratalog(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    return subprocess.run([*CLI, *args, "--target", server.target], capture_output=True,
                          timeout=300, env=env, check=False)


async def test_the_cli_cleans_every_partition_and_describes_the_cleaners_position(
    client: Client, server: ServerProcess
) -> None:
    topic = "cmp-cli"
    await client.create_topic(topic, 2, COMPACTED)
    for partition in (0, 1):
        await client.produce(topic, partition, [
            ProducerRecord(b"old", b"a", T0), ProducerRecord(b"new", b"a", T0 + 1)])
        await _roll(client, topic, b"s", T0 + 60_000, partition)

    cleaned = await asyncio.to_thread(_stratalog, server, "topics", "clean", topic)
    assert cleaned.returncode == 0, cleaned.stderr
    lines = cleaned.stdout.decode().splitlines()
    assert [line.split(" up to ")[0] for line in lines] == [
        f"Cleaned {topic}-0", f"Cleaned {topic}-1"]
    assert all("up to offset 2 (was 0): kept 1 of 2 records" in line for line in lines), lines

    as_json = await asyncio.to_thread(_stratalog, server, "topics", "clean", topic,
                                      "--partition", "1", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    [result] = json.loads(as_json.stdout)
    assert (result["partition"], result["first_dirty_offset_before"], result["end_offset"]) == (
        1, 2, 2)

    described = await asyncio.to_thread(_stratalog, server, "topics", "describe", topic)
    text = described.stdout.decode()
    assert text.count("\tCleanedOffset: 2\tDirtyRatio: 0.000\tLastClean: ") == 2, text
    described_json = await asyncio.to_thread(_stratalog, server, "topics", "describe", topic,
                                             "--format", "json")
    partitions = json.loads(described_json.stdout)["partitions"]
    assert [p["cleaned_offset"] for p in partitions] == [2, 2]
    assert all(p["last_clean_ms"] > T0 for p in partitions)

    # A topic that is not compacted: refused by the server (exit 1), its reason named.
    await client.create_topic("cmp-cli-delete", 1)
    refused = await asyncio.to_thread(_stratalog, server, "topics", "clean", "cmp-cli-delete")
    assert refused.returncode == 1
    assert "[INVALID_CONFIG]" in refused.stderr.decode()
    plain = await asyncio.to_thread(_stratalog, server, "topics", "describe", "cmp-cli-delete")
    assert "CleanedOffset" not in plain.stdout.decode()
    usage = await asyncio.to_thread(_stratalog, server, "topics", "clean", topic,
                                    "--partition", "-1")
    assert usage.returncode == 2


# ------------------------------------------------------------------------ the background cleaner


async def test_the_background_cleaner_cleans_a_dirty_partition_on_its_own(
    start_server, tmp_path
) -> None:
    server = start_server(tmp_path / "background", "--set", "log.cleaner.backoff.ms=100")
    async with Client(server.target, timeout_s=60) as client:
        topic = "cmp-background"
        await client.create_topic(topic, 1, {**COMPACTED, "min.cleanable.dirty.ratio": "0.1"})
        await client.produce(topic, 0, [ProducerRecord(b"v%d" % i, b"k%d" % (i % 10), T0 + i)
                                        for i in range(1000)])
        await _roll(client, topic, b"s", T0 + 60_000)

        # Bounded by a generous deadline, which only turns a hang into a failure.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while (await client.describe_topic(topic)).partitions[0].cleaned_offset != 1000:
            assert loop.time() < deadline, "the background cleaner never cleaned the partition"
            await asyncio.sleep(0.2)
        records = await _read_all(client, topic)
        assert [(r.key, r.value) for r in records] == [
            (b"k%d" % (i % 10), b"v%d" % i) for i in range(990, 1000)] + [(b"s", b"sentinel")]
        assert server.metric("stratalog_cleaner_cleanings_total") >= 1
        assert server.metric(
            f'stratalog_cleaner_last_clean_timestamp_seconds{{partition="0",topic="{topic}"}}'
        ) > T0 / 1000
    assert server.stop() == 0
