"""The Producer against a recording broker: batches, codecs, partitioning, retries, order."""

from __future__ import annotations

import asyncio
import itertools
import random
import types

import cramjam
import grpc
import pytest
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch

from stratalog.client import (
    Client,
    Producer,
    ProducerClosedError,
    RecordMetadata,
    errors,
    partition_for_key,
)
from stratalog.records import Compression, parse_header
from stratalog.records import CorruptRecordError as RecordCorruptError
from stratalog.server.storage import errors as storage_errors

from .conftest import Failure, RecordingBroker

TS = 1_700_000_000_000


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


def ordered_producer(client: Client | str, **options: object) -> Producer:
    """A Producer with one request in flight per partition unless told otherwise. This broker
    keeps no producer state, so only then is the stored order the send order for sure; with 5
    in flight the real server's sequence checks keep it (tests/integration)."""
    options.setdefault("max_in_flight_per_partition", 1)
    return Producer(client, **options)  # type: ignore[arg-type]


def kafka_records(broker: RecordingBroker, topic: str, partition: int) -> list[tuple]:
    """Every stored record as (offset, timestamp, key, value, headers), read by kafka-python."""
    out = []
    for data in broker.logs[(topic, partition)]:
        batch = DefaultRecordBatch(data)
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


@pytest.mark.parametrize("codec", list(Compression))
async def test_batches_are_kafka_v2_with_the_codec(broker, codec: Compression) -> None:
    servicer, target = broker
    async with ordered_producer(target, compression=codec, linger_ms=1000) as producer:
        futures = [
            await producer.send("events", b"value-%d" % i, key=b"key-%d" % i,
                                timestamp_ms=TS + i, headers=[("n", b"%d" % i)] if i % 2 else ())
            for i in range(500)
        ]
        await producer.flush()
        metadata = [await f for f in futures]
    assert metadata == [RecordMetadata("events", 0, i, TS + i) for i in range(500)]
    for data in servicer.logs[("events", 0)]:
        assert DefaultRecordBatch(data).compression_type == int(codec)
    assert kafka_records(servicer, "events", 0) == [
        (i, TS + i, b"key-%d" % i, b"value-%d" % i, [("n", b"%d" % i)] if i % 2 else [])
        for i in range(500)
    ]


async def test_batch_bytes_max_splits_and_keeps_order(broker) -> None:
    servicer, target = broker
    value = bytes(100)
    async with ordered_producer(target, batch_bytes_max=4096, linger_ms=1000) as producer:
        futures = [await producer.send("events", value, timestamp_ms=TS) for _ in range(1000)]
    assert [(await f).offset for f in futures] == list(range(1000))
    batches = servicer.logs[("events", 0)]
    assert len(batches) > 1
    for data in batches:
        header = parse_header(data)
        assert header.size_bytes <= 4096
    offsets = [r[0] for r in kafka_records(servicer, "events", 0)]
    assert offsets == list(range(1000))


async def test_record_larger_than_a_batch_goes_alone(broker) -> None:
    servicer, target = broker
    async with ordered_producer(target, batch_bytes_max=200, linger_ms=1000) as producer:
        small = await producer.send("events", b"a")
        big = await producer.send("events", bytes(1000))
        after = await producer.send("events", b"b")
    assert [(await f).offset for f in (small, big, after)] == [0, 1, 2]
    counts = [parse_header(d).records_count for d in servicer.logs[("events", 0)]]
    assert counts == [1, 1, 1]


async def test_linger_zero_batches_what_is_sent_in_one_loop_turn(broker) -> None:
    servicer, target = broker
    async with ordered_producer(target, linger_ms=0) as producer:
        await producer.partitions_for("events")
        futures = [await producer.send("events", b"x") for _ in range(50)]
        await asyncio.gather(*(asyncio.ensure_future(_wait(f)) for f in futures))
    # send() never yields once the topic is known, so all 50 joined the first batch.
    assert [parse_header(d).records_count for d in servicer.logs[("events", 0)]] == [50]


async def _wait(future):
    return await future


async def test_keyed_records_follow_kafkas_partitioner(broker) -> None:
    servicer, target = broker
    keys = [b"user-%d" % i for i in range(200)]
    async with ordered_producer(target) as producer:
        futures = [await producer.send("multi", b"v", key=k) for k in keys]
        results = [await f for f in futures]
    for key, meta in zip(keys, results, strict=True):
        assert meta.partition == partition_for_key(key, 4)
    stored = {
        p: [r[2] for r in kafka_records(servicer, "multi", p)] for p in range(4)
    }
    for key in keys:
        assert key in stored[partition_for_key(key, 4)]


async def test_unkeyed_records_stick_to_a_partition_per_batch(broker) -> None:
    servicer, target = broker
    async with ordered_producer(target, batch_bytes_max=2000, linger_ms=1000,
                        rng=random.Random(7)) as producer:
        futures = [await producer.send("multi", bytes(100)) for _ in range(400)]
        results = [await f for f in futures]
    # Each batch is filled by one partition before the sticky partition moves on.
    runs = []
    for meta in results:
        if not runs or runs[-1][0] != meta.partition:
            runs.append([meta.partition, 0])
        runs[-1][1] += 1
    assert len(runs) > 4
    assert all(a[0] != b[0] for a, b in itertools.pairwise(runs))
    assert all(n > 5 for _, n in runs[:-1])
    assert sum(servicer.records("multi", p) for p in range(4)) == 400


async def test_retriable_error_is_retried_once_appended(broker) -> None:
    servicer, target = broker
    servicer.failures.append(Failure(storage_errors.LogClosedError("closing")))  # SHUTTING_DOWN
    async with ordered_producer(target, retry_backoff_ms=1) as producer:
        future = await producer.send("events", b"once")
        meta = await future
    assert meta.offset == 0
    assert servicer.produce_calls == 2
    assert servicer.records("events", 0) == 1  # not duplicated


async def test_a_full_quota_backlog_is_retried_not_before_the_servers_hint(broker) -> None:
    from stratalog.server.security.errors import QuotaBacklogExceededError

    servicer, target = broker
    servicer.failures.append(Failure(QuotaBacklogExceededError(
        "backlog full", limit="quota_produce_bytes_in_flight_max", retry_after_ms=300)))
    loop = asyncio.get_running_loop()
    async with ordered_producer(target, retry_backoff_ms=1) as producer:
        started = loop.time()
        meta = await (await producer.send("events", b"later"))
        waited_s = loop.time() - started
    assert meta.offset == 0 and servicer.produce_calls == 2
    assert waited_s >= 0.8 * 0.3, waited_s  # the hint (jitter aside), not the 1 ms backoff


async def test_non_retriable_error_fails_the_batch_without_retry(broker) -> None:
    servicer, target = broker
    servicer.failures.append(Failure(RecordCorruptError("bad crc")))
    async with ordered_producer(target, retry_backoff_ms=1) as producer:
        doomed = [await producer.send("events", b"x") for _ in range(3)]
        await producer.flush()
        later = await producer.send("events", b"y")
        assert (await later).offset == 0  # a failed batch does not stop the Producer
    for future in doomed:
        with pytest.raises(errors.CorruptRecordError):
            await future
        assert isinstance(future.exception(), errors.CorruptRecordError)
    assert servicer.produce_calls == 2


async def test_retries_are_bounded(broker) -> None:
    servicer, target = broker
    for _ in range(10):
        servicer.failures.append(Failure(grpc.StatusCode.UNAVAILABLE))
    async with ordered_producer(target, retries=2, retry_backoff_ms=1) as producer:
        future = await producer.send("events", b"x")
        with pytest.raises(errors.BrokerUnavailableError):
            await future
    assert servicer.produce_calls == 3  # the first attempt and two retries
    assert servicer.records("events", 0) == 0


async def test_lost_response_means_at_least_once_without_idempotence(broker) -> None:
    # The server appended, then the answer was lost: a retry stores the batch again. This is
    # the documented at-least-once behaviour of Kafka's producer without idempotence (this
    # broker keeps no producer state; the idempotent case is tested against the real server)...
    servicer, target = broker
    servicer.failures.append(Failure(grpc.StatusCode.UNAVAILABLE, after_append=True))
    async with ordered_producer(target, idempotent=False, retry_backoff_ms=1) as producer:
        meta = await (await producer.send("events", b"dup"))
    assert servicer.records("events", 0) == 2 and meta.offset == 1
    # ...and retries=0 gives at-most-once: the error is reported, nothing is sent twice.
    servicer.failures.append(Failure(grpc.StatusCode.UNAVAILABLE, after_append=True))
    async with ordered_producer(target, idempotent=False, retries=0) as producer:
        future = await producer.send("events", b"once")
        with pytest.raises(errors.BrokerUnavailableError):
            await future
    assert servicer.records("events", 0) == 3


async def test_order_is_kept_across_a_retry_with_one_in_flight(broker) -> None:
    # This broker stores what it gets: with one request in flight the Producer alone keeps the
    # order. (With 5, the real server's sequence checks do: tests/integration.)
    servicer, target = broker
    servicer.failures.extend(
        [Failure(storage_errors.LogClosedError("closing")) for _ in range(2)]
    )
    async with ordered_producer(target, batch_bytes_max=300, linger_ms=1000, retry_backoff_ms=1,
                        max_in_flight_per_partition=1) as producer:
        futures = [await producer.send("events", b"%04d" % i) for i in range(300)]
    assert [(await f).offset for f in futures] == list(range(300))
    values = [r[3] for r in kafka_records(servicer, "events", 0)]
    assert values == [b"%04d" % i for i in range(300)]


async def test_send_waits_while_the_buffer_is_full(broker) -> None:
    servicer, target = broker
    servicer.gate = asyncio.Event()
    async with Client(target) as client:
        producer = ordered_producer(client, buffer_bytes_max=1000, batch_bytes_max=500, linger_ms=0)
        await producer.partitions_for("events")
        first = [await producer.send("events", bytes(100)) for _ in range(8)]
        blocked = asyncio.ensure_future(producer.send("events", bytes(100)))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not blocked.done()  # the server holds every batch: no space comes back
        assert producer.buffered_bytes >= 1000
        servicer.gate.set()
        last = await blocked
        await producer.close()
    assert [(await f).offset for f in [*first, last]] == list(range(9))
    assert producer.buffered_bytes == 0


async def test_send_many_returns_metadata_in_input_order(broker) -> None:
    servicer, target = broker
    async with ordered_producer(target, batch_bytes_max=1000) as producer:
        values = [b"v%d" % i for i in range(100)]
        keys = [b"k%d" % i for i in range(100)]
        pending = await producer.send_many("multi", values, keys,
                                           timestamps_ms=[TS + i for i in range(100)])
        results = await pending
    assert pending.done()
    assert [m.partition for m in results] == [partition_for_key(k, 4) for k in keys]
    assert [m.timestamp for m in results] == [TS + i for i in range(100)]
    for p in range(4):
        stored = kafka_records(servicer, "multi", p)
        mine = [m for m in results if m.partition == p]
        assert [r[0] for r in stored] == [m.offset for m in mine]
        assert [r[3] for r in stored] == [values[keys.index(r[2])] for r in stored]


async def test_send_many_to_one_partition(broker) -> None:
    servicer, target = broker
    async with ordered_producer(target) as producer:
        results = await (await producer.send_many("multi", [b"a", b"b", b"c"], partition=2))
    assert [(m.partition, m.offset) for m in results] == [(2, 0), (2, 1), (2, 2)]
    assert servicer.records("multi", 2) == 3


async def test_send_many_puts_its_headers_on_every_record(broker) -> None:
    servicer, target = broker
    headers = [("source", b"cli"), ("source", b"again"), ("none", None)]
    async with ordered_producer(target) as producer:
        await (await producer.send_many("multi", [b"a", None], [b"k", None], partition=1,
                                        headers=headers))
        await (await producer.send_many("multi", [b"plain"], partition=1))
        with pytest.raises(TypeError, match="headers"):
            await producer.send_many("multi", [b"x"], headers=[("h", "text")])
    # Read by kafka-python: the same headers, in order, on both records; none on the third.
    assert [(r[2], r[3], r[4]) for r in kafka_records(servicer, "multi", 1)] == [
        (b"k", b"a", headers), (None, None, headers), (None, b"plain", [])]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"value": "text"}, TypeError, "value"),
        ({"value": b"v", "key": "k"}, TypeError, "key"),
        ({"value": b"v", "partition": -1}, ValueError, "partition"),
        ({"value": b"v", "partition": 4}, ValueError, "partition 4 does not exist"),
        ({"value": b"v", "partition": "0"}, TypeError, "partition"),
        ({"value": b"v", "timestamp_ms": -3}, ValueError, "timestamp_ms"),
        ({"value": b"v", "headers": [("h", 1)]}, TypeError, "headers"),
    ],
)
async def test_bad_send_arguments_fail_before_any_rpc(broker, kwargs, error, message) -> None:
    servicer, target = broker
    async with ordered_producer(target) as producer:
        with pytest.raises(error, match=message):
            await producer.send("multi", **kwargs)
    assert servicer.produce_calls == 0


async def test_bad_send_many_arguments(broker) -> None:
    servicer, target = broker
    async with ordered_producer(target) as producer:
        with pytest.raises(TypeError, match=r"values\[1\]"):
            await producer.send_many("events", [b"a", "b"])
        with pytest.raises(ValueError, match="keys"):
            await producer.send_many("events", [b"a", b"b"], [b"k"])
        with pytest.raises(TypeError, match=r"keys\[0\]"):
            await producer.send_many("events", [b"a"], ["k"])
    assert servicer.produce_calls == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"linger_ms": -1}, ValueError, "linger_ms"),
        ({"batch_bytes_max": 10}, ValueError, "batch_bytes_max"),
        ({"compression": "brotli"}, ValueError, "compression"),
        ({"max_in_flight_per_partition": 0}, ValueError, "max_in_flight_per_partition"),
        ({"retries": -1}, ValueError, "retries"),
        ({"request_timeout_s": 0}, ValueError, "request_timeout_s"),
        ({"flush": "yes"}, TypeError, "flush"),
    ],
)
def test_bad_producer_settings(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        Producer("127.0.0.1:1", **kwargs)


async def test_unknown_topic(broker) -> None:
    _, target = broker
    async with ordered_producer(target) as producer:
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await producer.send("nope", b"v")


async def test_close_flushes_and_refuses_more(broker) -> None:
    _servicer, target = broker
    producer = ordered_producer(target, linger_ms=60_000)
    future = await producer.send("events", b"pending")
    assert not future.done()
    await producer.close()
    assert (await future).offset == 0
    with pytest.raises(ProducerClosedError):
        await producer.send("events", b"late")
    await producer.close()  # idempotent


async def test_close_with_timeout_fails_what_is_left(broker) -> None:
    servicer, target = broker
    servicer.gate = asyncio.Event()  # the server never answers
    producer = ordered_producer(target, linger_ms=0)
    future = await producer.send("events", b"stuck")
    await producer.close(timeout_s=0.05)
    with pytest.raises(ProducerClosedError):
        await future
    servicer.gate.set()


async def test_record_metadata_uses_log_append_time_when_given(broker) -> None:
    servicer, target = broker
    servicer.log_append_time = TS + 999
    async with ordered_producer(target) as producer:
        future = await producer.send("events", b"v", timestamp_ms=TS)
        many = await producer.send_many("events", [b"a", b"b"], timestamps_ms=[TS, TS])
        assert (await future).timestamp == TS + 999
        assert [m.timestamp for m in await many] == [TS + 999, TS + 999]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_records_read_back_by_kafka_python(broker, seed: int) -> None:
    # Every record shape (null/empty/long keys and values, headers with null values, timestamps
    # going backwards) through every codec, batch sizes small enough to split often.
    servicer, target = broker
    rng = random.Random(seed)

    def blob() -> bytes | None:
        return rng.choice([None, b"", rng.randbytes(rng.randrange(1, 300))])

    sent = []
    for _ in range(400):
        headers = [(rng.choice(["a", "é", ""]), blob()) for _ in range(rng.randrange(3))]
        sent.append((TS + rng.randrange(-5000, 5000), blob(), blob(), headers))
    codec = rng.choice(list(Compression))
    async with ordered_producer(target, compression=codec, batch_bytes_max=rng.randrange(200, 8000),
                        linger_ms=rng.choice([0, 1000])) as producer:
        futures = [
            await producer.send("events", value, key, timestamp_ms=ts, headers=headers)
            for ts, key, value, headers in sent
        ]
    assert [(await f).offset for f in futures] == list(range(len(sent)))
    assert kafka_records(servicer, "events", 0) == [
        (i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(sent)
    ]


async def _until(condition, deadline_s: float = 30.0) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), deadline_s)


@pytest.mark.parametrize("in_flight", [1, 3])
async def test_max_in_flight_per_partition(broker, in_flight: int) -> None:
    servicer, target = broker
    servicer.gate = asyncio.Event()  # the server holds every Produce until released
    async with Client(target) as client:
        producer = ordered_producer(client, batch_bytes_max=300, linger_ms=60_000,
                            max_in_flight_per_partition=in_flight)
        futures = [await producer.send("events", bytes(100)) for _ in range(12)]
        flushing = asyncio.ensure_future(producer.flush())
        await _until(lambda: servicer.produce_calls >= in_flight)
        await asyncio.sleep(0.2)  # room for a wrongly started extra request to arrive
        assert servicer.produce_calls == in_flight
        servicer.gate.set()
        await flushing
        await producer.close()
    # Held requests were released together; with one in flight the order is the send order.
    offsets = [(await f).offset for f in futures]
    assert sorted(offsets) == list(range(12))
    if in_flight == 1:
        assert offsets == list(range(12))


async def test_send_many_unkeyed_fills_batches_stickily_in_order(broker) -> None:
    servicer, target = broker
    values = [b"%05d" % i + bytes(95) for i in range(3000)]
    async with ordered_producer(target, batch_bytes_max=2048, linger_ms=1000,
                        rng=random.Random(5)) as producer:
        others = [b"other-%d" % i for i in range(5)]
        concurrent = asyncio.ensure_future(producer.send_many("multi", others))
        results = await (await producer.send_many("multi", values))
        await (await concurrent)
    assert len(results) == 3000
    # Stored per partition in input order, and every metadata points at its own value.
    stored = {p: kafka_records(servicer, "multi", p) for p in range(4)}
    for value, meta in zip(values, results, strict=True):
        assert stored[meta.partition][meta.offset][3] == value
    for p in range(4):
        mine = [v for v, m in zip(values, results, strict=True) if m.partition == p]
        assert [r[3] for r in stored[p] if r[3] in set(mine)] == mine
    assert len({m.partition for m in results}) > 1
    for p in range(4):
        for data in servicer.logs[("multi", p)]:
            assert parse_header(data).size_bytes <= 2048
