"""Client and SyncClient against the real server: every RPC, results as values, errors as classes.

One server per module (the ``server`` fixture of conftest.py); each test uses topics of its own.
Deadlines in these tests only turn a hang into a failure; no assertion depends on timing.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from stratalog.client import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    Client,
    FetchFormat,
    ProducerRecord,
    SyncClient,
    errors,
)
from stratalog.records import BatchBuilder, Compression, TimestampType

from .conftest import until

T0 = 1_700_000_000_000


@pytest.fixture
async def client(server_target):
    async with Client(server_target, timeout_s=30) as client:
        yield client


@pytest.fixture
def sync_client(server_target):
    with SyncClient(server_target, timeout_s=30) as client:
        yield client


def _batch(values: list[bytes], timestamp: int = T0, **kwargs: object) -> bytes:
    builder = BatchBuilder(**kwargs)  # type: ignore[arg-type]
    for i, value in enumerate(values):
        builder.append(timestamp + i, None, value)
    return builder.build()


# --- topics --------------------------------------------------------------------------------------


async def test_topic_admin_round_trip(client: Client) -> None:
    created = await client.create_topic("cr-admin", 3, {"segment.bytes": "1048576"})
    assert created.name == "cr-admin" and created.num_partitions == 3
    assert [p.partition for p in created.partitions] == [0, 1, 2]
    assert created.configs["segment.bytes"] == "1048576"
    assert created.partitions[0].max_timestamp == -1  # empty partition
    described = await client.describe_topic("cr-admin")
    assert described.configs["segment.bytes"] == "1048576"
    assert "cr-admin" in [t.name for t in await client.list_topics()]
    altered = await client.alter_topic_configs("cr-admin", set={"retention.ms": "1000"},
                                               delete=["segment.bytes"])
    assert altered.configs["retention.ms"] == "1000"
    assert altered.configs["segment.bytes"] != "1048576"  # back to the default
    await client.delete_topic("cr-admin")
    with pytest.raises(errors.UnknownTopicOrPartitionError) as caught:
        await client.describe_topic("cr-admin")
    assert not caught.value.retriable


async def test_topic_errors_are_classes(client: Client) -> None:
    await client.create_topic("cr-dup")
    with pytest.raises(errors.TopicAlreadyExistsError):
        await client.create_topic("cr-dup")
    for bad in ("../x", "a/b", "x" * 250, ".."):
        with pytest.raises(errors.InvalidTopicError):
            await client.create_topic(bad)
    with pytest.raises(errors.InvalidConfigError):
        await client.create_topic("cr-badconf", 1, {"no.such.config": "1"})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        await client.delete_topic("cr-never")


async def test_create_topic_exist_ok_returns_the_existing_topic(client: Client) -> None:
    # Issue 25 item 12: the README's example failed on its second run (TopicAlreadyExists).
    first = await client.create_topic("cr-exist-ok", 2, {"retention.ms": "60000"},
                                      exist_ok=True)  # it does not exist yet: created
    assert first.num_partitions == 2
    await client.produce("cr-exist-ok", 1, [b"kept"])
    again = await client.create_topic("cr-exist-ok", 2, {"retention.ms": "60000"},
                                      exist_ok=True)
    assert again.name == "cr-exist-ok" and again.configs["retention.ms"] == "60000"
    assert [p.log_end_offset for p in again.partitions] == [0, 1]  # the same topic, data kept
    # As it is, not as asked (kafka-topics.sh --if-not-exists): the caller compares.
    assert (await client.create_topic("cr-exist-ok", 5, exist_ok=True)).num_partitions == 2
    with pytest.raises(errors.TopicAlreadyExistsError):
        await client.create_topic("cr-exist-ok", 2)
    # Other refusals are still raised, and arguments are still checked.
    with pytest.raises(errors.InvalidTopicError):
        await client.create_topic("../x", exist_ok=True)
    with pytest.raises(errors.InvalidConfigError):
        await client.create_topic("cr-exist-ok-bad", 1, {"no.such.config": "1"}, exist_ok=True)
    with pytest.raises(TypeError, match="exist_ok must be a bool"):
        await client.create_topic("cr-exist-ok", exist_ok="yes")  # type: ignore[arg-type]


def test_sync_create_topic_exist_ok(sync_client: SyncClient) -> None:
    assert sync_client.create_topic("cr-sync-exist-ok", 3, exist_ok=True).num_partitions == 3
    assert sync_client.create_topic("cr-sync-exist-ok", 3, exist_ok=True).num_partitions == 3
    with pytest.raises(errors.TopicAlreadyExistsError):
        sync_client.create_topic("cr-sync-exist-ok", 3)
    with pytest.raises(TypeError, match="exist_ok must be a bool"):
        sync_client.create_topic("cr-sync-exist-ok", exist_ok=1)  # type: ignore[arg-type]


async def test_bad_arguments_raise_before_any_rpc(client: Client) -> None:
    with pytest.raises(ValueError, match="partition"):
        await client.produce("t", -1, [b"v"])
    with pytest.raises(TypeError, match=r"records\[0\]\.value"):
        await client.produce("t", 0, [ProducerRecord("not bytes")])
    with pytest.raises(ValueError, match="offset"):
        await client.fetch_by_offset("t", 0, -5)
    with pytest.raises(TypeError, match="timeout_s"):
        await client.list_topics(timeout_s="soon")


# --- produce and fetch ---------------------------------------------------------------------------


async def test_produce_records_and_fetch_both_formats(client: Client) -> None:
    await client.create_topic("cr-pf")
    result = await client.produce(
        "cr-pf", 0,
        [ProducerRecord(b"v0", key=b"k0", timestamp_ms=T0, headers=[("h", b"x"), ("n", None)]),
         ProducerRecord(None, key=b"k1", timestamp_ms=T0 + 1),
         b"v2"],
        compression="gzip",
    )
    assert (result.base_offset, result.last_offset, result.record_count) == (0, 2, 3)
    fetched = await client.fetch_by_offset("cr-pf", 0, 1)
    assert [r.offset for r in fetched.records] == [1, 2]
    tombstone = fetched.records[0]
    assert tombstone.value is None and tombstone.key == b"k1"
    assert tombstone.timestamp == T0 + 1
    assert tombstone.timestamp_type is TimestampType.CREATE_TIME
    assert fetched.high_watermark == 3 and fetched.next_offset == 3
    first = (await client.fetch_by_offset("cr-pf", 0, 0)).records[0]
    assert first.headers == (("h", b"x"), ("n", None))
    raw = await client.fetch_by_offset("cr-pf", 0, 0, fetch_format=FetchFormat.RECORD_BATCHES)
    assert not raw.records
    batch = DefaultRecordBatch(raw.record_batches)
    assert batch.compression_type == int(Compression.GZIP)
    assert [r.value for r in batch] == [b"v0", None, b"v2"]


async def test_pre_encoded_batches_come_back_byte_identical(client: Client) -> None:
    await client.create_topic("cr-raw")
    # An independent Kafka implementation's batch, base offset 0 as a producer sends it.
    builder = DefaultRecordBatchBuilder(2, 4, False, -1, -1, -1, 1 << 20)  # zstd
    for i in range(5):
        builder.append(i, T0 + i, b"key", b"value-%d" % i, [])
    kafka_bytes = bytes(builder.build())
    ours = _batch([b"a", b"b"], T0 + 10)
    first = await client.produce("cr-raw", 0, record_batches=kafka_bytes)
    second = await client.produce("cr-raw", 0, record_batches=ours, flush=True)
    assert (first.base_offset, second.base_offset, second.last_offset) == (0, 5, 6)
    raw = await client.fetch_by_offset("cr-raw", 0, 0, fetch_format=FetchFormat.RECORD_BATCHES)
    data = raw.record_batches
    second_at = len(kafka_bytes)
    # A broker sets the base offset and the partition leader epoch (bytes 0-8 and 12-16, both
    # outside the CRC, as Kafka's broker does); length, magic, CRC and all after are as sent.
    for sent, start in ((kafka_bytes, 0), (ours, second_at)):
        stored = data[start : start + len(sent)]
        assert stored[8:12] == sent[8:12]
        assert stored[16:] == sent[16:]
    assert int.from_bytes(data[second_at : second_at + 8], "big") == 5


async def test_corrupt_batches_are_refused(client: Client) -> None:
    await client.create_topic("cr-corrupt")
    bad_crc = bytearray(_batch([b"payload"]))
    bad_crc[-3] ^= 0x40
    with pytest.raises(errors.CorruptRecordError) as caught:
        await client.produce("cr-corrupt", 0, record_batches=bytes(bad_crc))
    assert not caught.value.retriable
    with pytest.raises((errors.CorruptRecordError, errors.InvalidRecordError)):
        await client.produce("cr-corrupt", 0, record_batches=_batch([b"x"])[:30])
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        await client.produce("cr-corrupt", 5, [b"x"])


async def test_fetch_by_timestamp_and_list_offsets(client: Client) -> None:
    await client.create_topic("cr-time")
    await client.produce("cr-time", 0, record_batches=_batch([b"a", b"b", b"c"], T0))
    await client.produce("cr-time", 0, record_batches=_batch([b"d", b"e"], T0 + 100))
    by_time = await client.fetch_by_timestamp("cr-time", 0, T0 + 50)
    assert (by_time.matched_offset, by_time.matched_timestamp) == (3, T0 + 100)
    assert [r.value for r in by_time.records] == [b"d", b"e"]
    none = await client.fetch_by_timestamp("cr-time", 0, T0 + 10_000)
    assert (none.matched_offset, none.matched_timestamp) == (-1, -1) and not none.records
    assert (await client.list_offsets("cr-time", 0, EARLIEST)).offset == 0
    assert (await client.list_offsets("cr-time", 0, LATEST)).offset == 5
    latest_ts = await client.list_offsets("cr-time", 0, MAX_TIMESTAMP)
    assert latest_ts.timestamp == T0 + 101
    assert tuple(await client.list_offsets("cr-time", 0, T0 + 2)) == (2, T0 + 2)
    assert (await client.list_offsets("cr-time", 0, T0 + 10_000)).offset == -1


async def test_delete_records_and_out_of_range(client: Client) -> None:
    await client.create_topic("cr-del")
    await client.produce("cr-del", 0, record_batches=_batch([b"%d" % i for i in range(10)]))
    assert await client.delete_records("cr-del", 0, 4) == 4
    with pytest.raises(errors.OffsetOutOfRangeError) as caught:
        await client.fetch_by_offset("cr-del", 0, 2)
    assert (caught.value.log_start_offset, caught.value.log_end_offset) == (4, 10)
    assert (await client.fetch_by_offset("cr-del", 0, 4)).records[0].offset == 4
    assert await client.delete_records("cr-del", 0, -1) == 10  # up to the high watermark


async def test_long_poll_waits_beyond_the_default_deadline(
    client: Client, server, server_target
) -> None:
    # The deadline of a long poll is timeout_s + max_wait_ms: a 1 s timeout does not cut a
    # poll that was asked to wait up to 5 s for data that arrives meanwhile.
    await client.create_topic("cr-poll")
    async with Client(server_target, timeout_s=1) as short:
        poll = asyncio.ensure_future(short.fetch_by_offset("cr-poll", 0, 0, max_wait_ms=5000))
        await until(lambda: server.waiting_rpcs("long_poll") == 1, "the poll waiting")
        await client.produce("cr-poll", 0, [b"late"])
        result = await poll
    assert [r.value for r in result.records] == [b"late"]


async def test_subscribe_follows_another_producer(client: Client) -> None:
    await client.create_topic("cr-sub")
    await client.produce("cr-sub", 0, [b"before"])
    seen: list[bytes] = []
    stream = client.subscribe("cr-sub", 0, offset=0)

    async def read() -> None:
        async for message in stream:
            seen.extend(r.value for r in message.records)
            if len(seen) >= 3:
                return

    reader = asyncio.ensure_future(read())
    await client.produce("cr-sub", 0, [b"after-1"])
    await client.produce("cr-sub", 0, [b"after-2"])
    await asyncio.wait_for(reader, 30)
    await stream.aclose()
    assert seen == [b"before", b"after-1", b"after-2"]


async def test_subscribe_errors_and_arguments(client: Client) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        client.subscribe("cr-none", 0)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        async for _ in client.subscribe("cr-none", 0, offset=0):
            pass


async def test_unreachable_server_is_retriable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with Client(f"127.0.0.1:{port}", timeout_s=2) as client:
        with pytest.raises((errors.BrokerUnavailableError, errors.RequestTimeoutError)) as caught:
            await client.list_topics()
    assert caught.value.retriable


# --- the blocking client -------------------------------------------------------------------------


def test_sync_client_every_rpc(sync_client: SyncClient) -> None:
    sync_client.wait_ready(30)
    info = sync_client.create_topic("cs-all", 2)
    assert info.num_partitions == 2
    assert sync_client.describe_topic("cs-all").name == "cs-all"
    assert "cs-all" in [t.name for t in sync_client.list_topics()]
    sync_client.alter_topic_configs("cs-all", set={"retention.ms": "5000"})
    produced = sync_client.produce("cs-all", 1, [ProducerRecord(b"x", timestamp_ms=T0)])
    assert produced.base_offset == 0
    sync_client.produce("cs-all", 1, record_batches=_batch([b"y", b"z"], T0 + 5))
    assert [r.value for r in sync_client.fetch_by_offset("cs-all", 1, 0).records] == [
        b"x", b"y", b"z"]
    assert sync_client.fetch_by_timestamp("cs-all", 1, T0 + 5).matched_offset == 1
    assert sync_client.list_offsets("cs-all", 1, LATEST).offset == 3
    stream = sync_client.subscribe("cs-all", 1, offset=1)
    first = next(stream)
    stream.close()
    assert first.records[0].offset == 1
    with pytest.raises(errors.OffsetOutOfRangeError):
        sync_client.fetch_by_offset("cs-all", 1, 4)
    sync_client.delete_topic("cs-all")
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        sync_client.describe_topic("cs-all")


def test_sync_client_delete_records(sync_client: SyncClient) -> None:
    sync_client.create_topic("cs-del")
    sync_client.produce("cs-del", 0, [b"a", b"b", b"c"])
    assert sync_client.delete_records("cs-del", 0, 1) == 1
    with pytest.raises(errors.OffsetOutOfRangeError) as caught:
        sync_client.fetch_by_offset("cs-del", 0, 0)
    assert caught.value.log_start_offset == 1


def test_sync_client_argument_errors(sync_client: SyncClient) -> None:
    with pytest.raises(ValueError, match="partition"):
        sync_client.fetch_by_offset("t", -1, 0)
    with pytest.raises(ValueError, match="exactly one"):
        sync_client.subscribe("t", 0, offset=1, timestamp_ms=2)
    with pytest.raises(TypeError, match="target"):
        SyncClient("")
