"""Point reads (``max_records``) against the real server: the records asked for and no more.

FetchByOffset and FetchByTimestamp with ``max_records`` answer with the records from the offset
(or the matched record) on, cut out of their stored batches: RECORD_BATCHES as re-framed v2
batches that kafka-python's reader (the independent oracle) reads with their offsets,
timestamps, keys and headers; RECORDS decoded from those. Transactions around the records keep
READ_COMMITTED's answer. One server per module; each test has topics of its own.
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from stratalog.client import Client, FetchFormat, IsolationLevel, Producer, SyncClient, errors
from stratalog.records import BatchBuilder, Compression, iter_batch_headers

T0 = 1_700_000_000_000


@pytest.fixture
async def client(server_target):
    async with Client(server_target, timeout_s=30) as client:
        yield client


def _batch(count: int, first: int = 0, compression: Compression = Compression.NONE,
           **fields: object) -> bytes:
    builder = BatchBuilder(compression=compression, **fields)  # type: ignore[arg-type]
    for i in range(first, first + count):
        builder.append(T0 + 10 * i, b"k%d" % i, b"value-%d" % i, [("h", b"%d" % i)])
    return builder.build()


def _oracle(data: bytes) -> list[tuple[int, int, bytes, bytes, list]]:
    """Every record of ``data`` as kafka-python reads it, CRCs checked."""
    out = []
    for header in iter_batch_headers(data):
        batch = DefaultRecordBatch(data[header.position:header.end_position])
        assert batch.validate_crc()
        out.extend((r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch)
    return out


def _expected(offset: int) -> tuple[int, int, bytes, bytes, list]:
    return (offset, T0 + 10 * offset, b"k%d" % offset, b"value-%d" % offset,
            [("h", b"%d" % offset)])


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
async def test_one_record_of_a_batch_alone_in_either_format(client, compression):
    topic = f"point-one-{compression.name.lower()}"
    await client.create_topic(topic, 1)
    await client.produce(topic, 0, record_batches=_batch(100, compression=compression))
    await client.produce(topic, 0, record_batches=_batch(50, 100, compression=compression))
    for offset in (0, 37, 99, 100, 149):
        result = await client.fetch_by_offset(
            topic, 0, offset, max_records=1, fetch_format=FetchFormat.RECORD_BATCHES
        )
        assert _oracle(result.record_batches) == [_expected(offset)]
        assert result.next_offset == offset + 1
        assert result.high_watermark == 150
        records = (await client.fetch_by_offset(topic, 0, offset, max_records=1)).records
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records] == [
            _expected(offset)
        ]


async def test_max_records_spans_batches_and_stops_inside_one(client):
    topic = "point-span"
    await client.create_topic(topic, 1)
    for first in range(0, 40, 10):
        await client.produce(topic, 0, record_batches=_batch(10, first))
    result = await client.fetch_by_offset(
        topic, 0, 7, max_records=15, fetch_format=FetchFormat.RECORD_BATCHES
    )
    assert _oracle(result.record_batches) == [_expected(o) for o in range(7, 22)]
    assert result.next_offset == 22
    # Whole batches in between are the stored ones, byte for byte.
    stored = (await client.fetch_by_offset(
        topic, 0, 10, max_bytes=1, fetch_format=FetchFormat.RECORD_BATCHES)).record_batches
    assert stored in result.record_batches
    result = await client.fetch_by_offset(topic, 0, 35, max_records=100)
    assert [r.offset for r in result.records] == list(range(35, 40))
    assert result.next_offset == 40


async def test_max_bytes_bounds_a_partial_answer_after_its_first_record(client):
    topic = "point-bytes"
    await client.create_topic(topic, 1)
    await client.produce(topic, 0, record_batches=_batch(100))
    result = await client.fetch_by_offset(
        topic, 0, 10, max_records=1000, max_bytes=1, fetch_format=FetchFormat.RECORD_BATCHES
    )
    assert [r[0] for r in _oracle(result.record_batches)] == [10]
    assert result.next_offset == 11


async def test_fetch_by_timestamp_answers_the_matched_record(client):
    topic = "point-time"
    await client.create_topic(topic, 1)
    await client.produce(topic, 0, record_batches=_batch(100))
    result = await client.fetch_by_timestamp(
        topic, 0, T0 + 10 * 42 - 5, max_records=1, fetch_format=FetchFormat.RECORD_BATCHES
    )
    assert (result.matched_offset, result.matched_timestamp) == (42, T0 + 420)
    assert _oracle(result.record_batches) == [_expected(42)]
    assert result.next_offset == 43
    result = await client.fetch_by_timestamp(topic, 0, T0 + 10 * 97, max_records=2)
    assert [(r.offset, r.timestamp) for r in result.records] == [(97, T0 + 970), (98, T0 + 980)]


async def test_producer_batches_read_one_record_at_a_time(client):
    topic = "point-producer"
    await client.create_topic(topic, 1)
    async with Producer(client) as producer:
        await producer.send_many(topic, [b"v%d" % i for i in range(5000)], partition=0)
        await producer.flush()
    for offset in (0, 1234, 4999):
        result = await client.fetch_by_offset(topic, 0, offset, max_records=1)
        assert [(r.offset, r.value) for r in result.records] == [(offset, b"v%d" % offset)]


async def test_read_committed_point_reads_skip_aborted_and_control_batches(client):
    topic = "point-txn"
    await client.create_topic(topic, 1)
    await client.produce(topic, 0, record_batches=_batch(5))  # offsets 0-4
    async with Producer(client, transactional_id="point-aborter") as aborter:
        await aborter.begin_transaction()
        await aborter.send_many(topic, [b"aborted"] * 3, partition=0)
        await aborter.flush()
        await aborter.abort_transaction()  # offsets 5-7, the ABORT marker 8
    async with Producer(client, transactional_id="point-committer") as committer:
        await committer.begin_transaction()
        await committer.send_many(topic, [b"committed"] * 2, partition=0)
        await committer.flush()
        await committer.commit_transaction()  # offsets 9-10, the COMMIT marker 11
    for fetch_format in (FetchFormat.RECORDS, FetchFormat.RECORD_BATCHES):
        result = await client.fetch_by_offset(
            topic, 0, 5, max_records=2, fetch_format=fetch_format,
            isolation_level=IsolationLevel.READ_COMMITTED,
        )
        assert not result.aborted_transactions
        if fetch_format == FetchFormat.RECORDS:
            got = [(r.offset, r.value) for r in result.records]
        else:
            got = [(r[0], r[3]) for r in _oracle(result.record_batches)]
        # 5-7 aborted and the marker at 8 left out: the next records a reader delivers.
        assert got == [(9, b"committed"), (10, b"committed")]
        assert result.next_offset == 11
        # READ_UNCOMMITTED sees the aborted records; neither sees a control batch.
        result = await client.fetch_by_offset(
            topic, 0, 7, max_records=2, fetch_format=fetch_format
        )
        if fetch_format == FetchFormat.RECORDS:
            got = [(r.offset, r.value) for r in result.records]
        else:
            got = [(r[0], r[3]) for r in _oracle(result.record_batches)]
        assert got == [(7, b"aborted"), (9, b"committed")]


def test_sync_client_point_read_and_a_negative_max_records(server_target):
    with SyncClient(server_target, timeout_s=30) as sync:
        sync.create_topic("point-sync", 1)
        sync.produce("point-sync", 0, record_batches=_batch(20))
        assert [r.offset for r in sync.fetch_by_offset("point-sync", 0, 3, max_records=1)
                .records] == [3]
        assert [r.offset for r in sync.fetch_by_timestamp("point-sync", 0, T0, max_records=2)
                .records] == [0, 1]
        with pytest.raises(ValueError, match="max_records"):
            sync.fetch_by_offset("point-sync", 0, 3, max_records=-1)


def test_server_names_a_negative_max_records(stub, rpc_error):
    from stratalog.v1 import broker_pb2

    error = rpc_error(stub.FetchByOffset, broker_pb2.FetchByOffsetRequest(
        topic="point-negative", partition=0, offset=0, max_records=-1))
    assert isinstance(error, errors.InvalidRequestError)
    assert "max_records" in str(error)
