"""Producer and Consumer against the real server: placement, order, codecs, starts, seeks, follow.

One server per module; each test uses topics of its own. No assertion depends on timing; waits
are bounded by generous deadlines that only turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import random
import types

import cramjam
import pytest
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch

from stratalog.client import (
    Client,
    Consumer,
    FetchFormat,
    IsolationLevel,
    OffsetReset,
    Producer,
    errors,
    partition_for_key,
)
from stratalog.records import Compression, parse_header

T0 = 1_700_000_000_000
DEADLINE_S = 60


@pytest.fixture(autouse=True)
def _cramjam_as_python_snappy(monkeypatch):
    """kafka-python takes raw snappy blocks from python-snappy (not installed); cramjam gives
    the same two functions, and kafka-python's own xerial framing code still reads ours."""
    if not kafka_codec.has_snappy():
        shim = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
        )
        monkeypatch.setattr(kafka_codec, "snappy", shim)


@pytest.fixture
async def client(server_target):
    async with Client(server_target, timeout_s=30) as client:
        yield client


async def _consume_all(client: Client, topic: str, **kwargs: object) -> list:
    async def read() -> list:
        async with Consumer(client, topic, **kwargs) as consumer:  # type: ignore[arg-type]
            return [record async for record in consumer]

    return await asyncio.wait_for(read(), DEADLINE_S)


@pytest.mark.parametrize("codec", list(Compression))
async def test_keyed_records_round_trip_in_order(client: Client, codec: Compression) -> None:
    topic = f"pc-keys-{codec.name.lower()}"
    await client.create_topic(topic, 3)
    sent = [(b"key-%d" % (i % 17), b"value-%d" % i) for i in range(3000)]
    async with Producer(client, compression=codec, batch_bytes_max=16384) as producer:
        futures = [await producer.send(topic, v, key=k, timestamp_ms=T0 + i)
                   for i, (k, v) in enumerate(sent)]
    metadata = [await f for f in futures]
    for (key, _), meta in zip(sent, metadata, strict=True):
        assert meta.partition == partition_for_key(key, 3)
    records = await _consume_all(client, topic)
    assert len(records) == len(sent)
    by_partition: dict[int, list] = collections.defaultdict(list)
    for record in records:
        by_partition[record.partition].append(record)
    for partition, got in by_partition.items():
        expected = [(k, v) for k, v in sent if partition_for_key(k, 3) == partition]
        assert [(r.key, r.value) for r in got] == expected  # order kept per partition
        assert [r.offset for r in got] == list(range(len(got)))
    # Every record is where its future said.
    where = {(r.partition, r.offset): r.value for r in records}
    assert all(where[(m.partition, m.offset)] == v
               for m, (_, v) in zip(metadata, sent, strict=True))
    # The stored batches are Kafka v2 batches with the codec, readable by kafka-python.
    raw = await client.fetch_by_offset(topic, 0, 0, fetch_format=FetchFormat.RECORD_BATCHES)
    first_batch = raw.record_batches[: parse_header(raw.record_batches).size_bytes]
    batch = DefaultRecordBatch(first_batch)
    assert batch.compression_type == int(codec) and batch.validate_crc()


@pytest.mark.parametrize("how", ["send_many", "send"])
async def test_unkeyed_records_fill_partitions_evenly(client: Client, how: str) -> None:
    # Issue 15: 100,000 unkeyed records to 3 partitions landed 80,692 / 0 / 19,308 when the
    # sticky partition moved per (large) batch to a random partition.
    topic = f"pc-sticky-{how}"
    await client.create_topic(topic, 3)
    values = [b"line %d" % i for i in range(100_000)]
    async with Producer(client) as producer:
        if how == "send_many":
            for start in range(0, len(values), 10_000):
                await producer.send_many(topic, values[start : start + 10_000])
        else:
            for value in values:
                last = await producer.send(topic, value)
    if how == "send":
        await last
    info = await client.describe_topic(topic)
    counts = [p.log_end_offset for p in info.partitions]
    assert sum(counts) == len(values)
    third = len(values) / 3
    assert all(0.8 * third <= n <= 1.2 * third for n in counts), counts
    # Consecutive records stick together: far fewer stints than records.
    async with Consumer(client, topic, partitions=[0]) as consumer:
        first = [record.value async for record in consumer][:100]
    numbers = [int(value.split()[1]) for value in first]
    assert sum(b == a + 1 for a, b in itertools.pairwise(numbers)) >= 90


async def test_consumer_starting_points(client: Client) -> None:
    await client.create_topic("pc-start")
    async with Producer(client) as producer:
        await producer.send_many("pc-start", [b"%d" % i for i in range(100)],
                                 timestamps_ms=[T0 + 10 * i for i in range(100)])
    assert [r.offset for r in await _consume_all(client, "pc-start", start=95)] == list(
        range(95, 100))
    assert await _consume_all(client, "pc-start", start="latest") == []
    from_time = await _consume_all(client, "pc-start", start_timestamp_ms=T0 + 955)
    assert [r.offset for r in from_time] == list(range(96, 100))
    assert await _consume_all(client, "pc-start", start_timestamp_ms=T0 + 10**9) == []
    earliest = await _consume_all(client, "pc-start", start="earliest", partitions=[0])
    assert [r.value for r in earliest] == [b"%d" % i for i in range(100)]
    assert earliest[3].timestamp == T0 + 30


async def test_seek_and_batch_iteration(client: Client) -> None:
    await client.create_topic("pc-seek", 2)
    async with Producer(client) as producer:
        await producer.send_many("pc-seek", [b"a%d" % i for i in range(50)], partition=0,
                                 timestamps_ms=[T0 + i for i in range(50)])
        await producer.send_many("pc-seek", [b"b%d" % i for i in range(30)], partition=1)

    async def run() -> None:
        async with Consumer(client, "pc-seek", start="earliest") as consumer:
            assert sorted(consumer.partitions) == [0, 1]
            consumer.seek(0, 40)
            await consumer.seek_to_end(1)
            seen = []
            async for batch in consumer.batches():
                seen.extend(batch.offsets)
                assert batch.partition == 0
                assert batch.values == [b"a%d" % o for o in batch.offsets]
            assert seen == list(range(40, 50))
            assert consumer.position(0) == 50 and consumer.position(1) == 30
            assert await consumer.seek_to_timestamp(0, T0 + 45) == 45
            await consumer.seek_to_beginning(1)
            rest = [(r.partition, r.offset) async for r in consumer]
            assert sorted(rest) == [(0, o) for o in range(45, 50)] + [(1, o) for o in range(30)]
            with pytest.raises(ValueError, match="not assigned"):
                consumer.seek(5, 0)

    await asyncio.wait_for(run(), DEADLINE_S)


@pytest.mark.parametrize("use_subscribe", [False, True])
async def test_follow_sees_records_produced_later(client: Client, use_subscribe: bool) -> None:
    topic = f"pc-follow-{int(use_subscribe)}"
    await client.create_topic(topic)
    await client.produce(topic, 0, [b"first"])
    consumer = Consumer(client, topic, follow=True, use_subscribe=use_subscribe,
                        max_wait_ms=200)
    received: list[bytes] = []

    async def read() -> None:
        async for record in consumer:
            received.append(record.value)
            if len(received) == 4:
                return

    reader = asyncio.ensure_future(read())
    async with Producer(client, linger_ms=0) as producer:
        for value in (b"second", b"third", b"fourth"):
            await (await producer.send(topic, value))
    await asyncio.wait_for(reader, DEADLINE_S)
    await consumer.close()
    assert received == [b"first", b"second", b"third", b"fourth"]


async def test_offset_out_of_range_policies(client: Client) -> None:
    await client.create_topic("pc-reset")
    await client.produce("pc-reset", 0, [b"%d" % i for i in range(10)])
    beyond = await _consume_all(client, "pc-reset", start=50, auto_offset_reset="earliest")
    assert [r.offset for r in beyond] == list(range(10))
    assert await _consume_all(client, "pc-reset", start=50, auto_offset_reset="latest") == []
    for none in ("none", "error"):  # Kafka's name, and the one it had before
        with pytest.raises(errors.OffsetOutOfRangeError) as caught:
            await _consume_all(client, "pc-reset", start=50, auto_offset_reset=none)
        assert caught.value.log_end_offset == 10


async def test_a_reset_is_told_to_on_offset_reset_never_silent(client: Client, caplog) -> None:
    # Issue 15: the reset was logged at INFO only, which nobody sees.
    await client.create_topic("pc-reset-told")
    await client.produce("pc-reset-told", 0, [b"%d" % i for i in range(10)])
    await client.delete_records("pc-reset-told", 0, 4)
    told: list[OffsetReset] = []
    below = await _consume_all(client, "pc-reset-told", start=2, on_offset_reset=told.append)
    assert [r.offset for r in below] == list(range(4, 10))
    assert told == [OffsetReset("pc-reset-told", 0, 2, 4, 10, 4)]
    assert "pc-reset-told-0: offset 2 out of range [4, 10)" in caplog.text
    assert any(r.levelname == "WARNING" for r in caplog.records)
    told.clear()
    assert await _consume_all(client, "pc-reset-told", start=99, auto_offset_reset="latest",
                              on_offset_reset=told.append) == []
    assert told == [OffsetReset("pc-reset-told", 0, 99, 4, 10, 10)]
    # In range: nothing to tell.
    told.clear()
    assert len(await _consume_all(client, "pc-reset-told", start=4,
                                  on_offset_reset=told.append)) == 6
    assert told == []


async def test_consumer_and_producer_argument_errors(client: Client) -> None:
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer(client, "t", auto_offset_reset="never")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_offset_reset"):
        Consumer(client, "t", on_offset_reset="print")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start"):
        Consumer(client, "t", start=-1)
    with pytest.raises(ValueError, match="duplicates"):
        Consumer(client, "t", partitions=[0, 0])
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        await _consume_all(client, "pc-missing")
    await client.create_topic("pc-args", 2)
    with pytest.raises(ValueError, match="do not exist"):
        await _consume_all(client, "pc-args", partitions=[0, 7])
    async with Producer(client) as producer:
        with pytest.raises(ValueError, match="partition 2 does not exist"):
            await producer.send("pc-args", b"v", partition=2)
        with pytest.raises(TypeError, match="value"):
            await producer.send("pc-args", "text")  # type: ignore[arg-type]
    assert sum(p.log_end_offset for p in (await client.describe_topic("pc-args")).partitions) == 0


async def test_large_records_and_batches(client: Client) -> None:
    # A value near the default batch size travels alone and comes back whole.
    await client.create_topic("pc-large")
    big = bytes(range(256)) * 3000  # 768,000 bytes
    async with Producer(client, compression="lz4") as producer:
        futures = [await producer.send("pc-large", b"small"),
                   await producer.send("pc-large", big),
                   await producer.send("pc-large", b"after")]
    assert [(await f).offset for f in futures] == [0, 1, 2]
    records = await _consume_all(client, "pc-large", max_bytes=1024)
    assert [r.value for r in records] == [b"small", big, b"after"]


async def test_close_ends_a_following_reader(client: Client) -> None:
    await client.create_topic("pc-close")
    consumer = Consumer(client, "pc-close", follow=True, max_wait_ms=0, retry_backoff_ms=10)
    await consumer.start()

    async def read() -> list:
        return [record async for record in consumer]

    reader = asyncio.ensure_future(read())
    await client.produce("pc-close", 0, [b"only"])

    async def until_read() -> None:
        while consumer.position(0) == 0:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(until_read(), DEADLINE_S)  # the reader got the record
    await consumer.close()
    records = await asyncio.wait_for(reader, DEADLINE_S)
    assert [r.value for r in records] == [b"only"]
    with pytest.raises(Exception, match="closed"):
        consumer.seek(0, 0)


# --- positions (issue 25 item 2) ---------------------------------------------------------------
# position(p) is the offset after the last record handed to the caller (Kafka's consumer
# position), not the fetchers' cursor: a reader that saves it and resumes there (the same
# Consumer iterated again, or a new one) neither skips nor repeats a record.


async def test_position_after_a_break_is_past_the_last_record_handed_over(
    client: Client,
) -> None:
    await client.create_topic("pc-pos-break")
    await client.produce("pc-pos-break", 0, [b"%d" % i for i in range(10)])  # one batch

    async def run() -> None:
        async with Consumer(client, "pc-pos-break") as consumer:
            async for record in consumer:
                if record.offset == 1:
                    break
            assert consumer.position(0) == 2  # was 10: records 2..9 fetched, not handed over
            saved = consumer.position(0)
            # The same Consumer, iterated again: the rest of the batch, nothing twice.
            rest = [record.offset async for record in consumer]
            assert rest == list(range(2, 10))
            assert consumer.position(0) == 10
        # A new Consumer started at the saved position: the same rest.
        async with Consumer(client, "pc-pos-break", start=saved) as resumed:
            assert [record.offset async for record in resumed] == list(range(2, 10))
            assert resumed.position(0) == 10
        # Seeking to the position (what a reader that stores it may do) changes nothing.
        async with Consumer(client, "pc-pos-break") as consumer:
            async for record in consumer:
                if record.offset == 4:
                    break
            consumer.seek(0, consumer.position(0))
            assert [record.offset async for record in consumer] == list(range(5, 10))

    await asyncio.wait_for(run(), DEADLINE_S)


async def test_positions_through_breaks_batches_and_seeks_lose_and_repeat_nothing(
    client: Client,
) -> None:
    """Random-length reads, per record and per batch in turn, each ended by a break, over two
    partitions of many small batches (several per fetch, so a break leaves fetched batches
    behind): every record exactly once, and position() after each read is one past the last
    record of that partition handed over."""
    topic = "pc-pos-mixed"
    await client.create_topic(topic, 2)
    for partition in (0, 1):
        for start in range(0, 300, 7):  # batches of 7 records
            await client.produce(topic, partition, [b"%d-%d" % (partition, o)
                                                    for o in range(start, min(start + 7, 300))])
    rng = random.Random(25)

    async def run() -> None:
        async with Consumer(client, topic, max_bytes=2048, prefetch_batches=2) as consumer:
            seen: dict[int, list[int]] = {0: [], 1: []}
            for step in range(200):  # bounded; ends when every record was seen
                if sum(map(len, seen.values())) == 600:
                    break
                want = rng.randint(1, 40)
                got: list[tuple[int, int]] = []
                if step % 3 == 2:
                    async for batch in consumer.batches():
                        got.extend((batch.partition, o) for o in batch.offsets)
                        if len(got) >= want:
                            break
                else:
                    async for record in consumer:
                        got.append((record.partition, record.offset))
                        if len(got) >= want:
                            break
                for partition, offset in got:
                    seen[partition].append(offset)
                for partition in (0, 1):
                    if seen[partition]:
                        assert consumer.position(partition) == seen[partition][-1] + 1
            assert seen == {0: list(range(300)), 1: list(range(300))}
            assert [record async for record in consumer] == []
            # A seek while holding a record drops the rest of its batch.
            consumer.seek(0, 100)
            await consumer.seek_to_end(1)
            async for record in consumer:
                assert (record.partition, record.offset) == (0, 100)
                consumer.seek(0, 200)
                break
            assert consumer.position(0) == 200
            assert [r.offset async for r in consumer] == list(range(200, 300))

    await asyncio.wait_for(run(), DEADLINE_S)


async def test_position_past_a_commit_marker_resumes_without_repeats(client: Client) -> None:
    # A transaction's records 0..4, then its COMMIT marker (offset 5), then record 6.
    topic = "pc-pos-txn"
    await client.create_topic(topic)
    producer = Producer(client, transactional_id="pc-pos-txn")
    async with producer, producer.transaction():
        await producer.send_many(topic, [b"%d" % i for i in range(5)], partition=0)
    await client.produce(topic, 0, [b"after"])

    async def run() -> None:
        async with Consumer(client, topic, isolation_level=IsolationLevel.READ_COMMITTED) \
                as consumer:
            async for record in consumer:
                if record.offset == 4:
                    break
            assert consumer.position(0) == 5  # the marker is not a record handed over
            async for record in consumer:
                assert (record.offset, record.value) == (6, b"after")
                break
            assert consumer.position(0) == 7
        for start in (5, 6):  # resuming at the marker or after it: the same next record
            async with Consumer(client, topic, start=start) as resumed:
                assert [r.offset async for r in resumed] == [6]

    await asyncio.wait_for(run(), DEADLINE_S)
