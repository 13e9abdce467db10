"""The servicer's own pieces: the Produce `records` encoding, request checks, partition gates.

Every RPC is exercised against a real server process in tests/integration/; these tests pin the
parts that do not need one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from google.rpc import error_details_pb2, status_pb2

from stratalog.records import build_batch
from stratalog.records.batch import (
    Compression,
    TimestampType,
    iter_batch_headers,
    validate_batch,
)
from stratalog.records.control import ControlRecordType, encode_control_key
from stratalog.records.reader import decode_batch, iter_batches
from stratalog.server import service as service_module
from stratalog.server.metrics import ServerMetrics
from stratalog.server.service import (
    BadRequestError,
    BrokerService,
    PartitionGate,
    _decode_into,
    _topic,
    encode_records,
)
from stratalog.server.settings import Settings
from stratalog.server.storage.errors import StorageError
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.v1 import broker_pb2


def _record(**fields: object) -> broker_pb2.Record:
    headers = fields.pop("headers", [])
    record = broker_pb2.Record(**fields)
    for key, value in headers:  # type: ignore[attr-defined]
        header = record.headers.add(key=key)
        if value is not None:
            header.value = value
    return record


@pytest.mark.parametrize("codec", list(Compression))
def test_encode_records_builds_a_valid_batch_kafka_reads(codec: Compression) -> None:
    records = [
        _record(timestamp=1_700_000_000_000, key=b"k0", value=b"v0"),
        _record(value=b"no key, server clock"),
        _record(timestamp=1_700_000_000_005, key=b"k2"),  # null value: a tombstone
        _record(timestamp=1_699_999_999_999, key=b"", value=b"",
                headers=[("h1", b"x"), ("h-null", None), ("ünï", b"")]),
    ]
    batch = encode_records(records, int(codec), now_ms=1_700_000_000_123)
    header = validate_batch(batch)
    assert header.base_offset == 0
    assert header.records_count == 4
    assert header.compression == codec
    assert header.timestamp_type == TimestampType.CREATE_TIME
    _, decoded = decode_batch(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (0, 1_700_000_000_000, b"k0", b"v0"),
        (1, 1_700_000_000_123, None, b"no key, server clock"),
        (2, 1_700_000_000_005, b"k2", None),
        (3, 1_699_999_999_999, b"", b""),
    ]
    assert decoded[3].headers == (("h1", b"x"), ("h-null", None), ("ünï", b""))
    # An independent implementation (aiokafka's compiled reader) reads the same records.
    theirs = list(AioBatch(bytearray(batch)))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == [
        (r.offset, r.timestamp, r.key, r.value) for r in decoded
    ]


def test_encode_records_rejects_an_unknown_codec() -> None:
    with pytest.raises(BadRequestError) as caught:
        encode_records([_record(value=b"x")], 7, now_ms=0)
    assert caught.value.field == "compression"
    assert "unknown codec 7" in str(caught.value)


def test_encode_records_names_the_record_that_cannot_be_encoded() -> None:
    # The second timestamp's delta from the first does not fit in int64.
    records = [_record(timestamp=1, value=b"a"), _record(timestamp=-(2**63), value=b"b")]
    with pytest.raises(BadRequestError) as caught:
        encode_records(records, 0, now_ms=0)
    assert caught.value.field == "records[1]"
    assert caught.value.reason == "INVALID_RECORD"


def test_bad_request_status_names_the_field() -> None:
    status = BadRequestError("max_bytes", "must be >= 0, got -1").to_status()
    assert status.code is grpc.StatusCode.INVALID_ARGUMENT
    assert status.details == "max_bytes: must be >= 0, got -1"
    # The trailer holds a google.rpc.Status with one ErrorInfo.
    ((key, value),) = status.trailing_metadata
    assert key == "grpc-status-details-bin"
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(value).details[0].Unpack(info)
    assert info.reason == "INVALID_REQUEST"
    assert info.domain == "stratalog"
    assert dict(info.metadata) == {"field": "max_bytes"}


async def test_gate_signal_taken_before_a_read_sees_an_append_after_it() -> None:
    gate = PartitionGate()
    signal = gate.signal()  # a reader takes the signal, then reads (nothing yet) ...
    gate.notify()  # ... an append lands between its read and its wait ...
    assert await gate.wait(signal, 0)  # ... and the wait returns at once: no lost wake-up.
    # A signal taken after that append waits for the next one.
    later = gate.signal()
    assert not await gate.wait(later, 0.01)


async def test_gate_wakes_every_waiter_and_close_wakes_them_for_good() -> None:
    gate = PartitionGate()
    waiters = [asyncio.create_task(gate.wait(gate.signal(), None)) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    gate.notify()
    assert await asyncio.gather(*waiters) == [True, True, True]
    waiter = asyncio.create_task(gate.wait(gate.signal(), None))
    await asyncio.sleep(0)
    gate.close()
    assert await waiter
    assert gate.closed


async def test_append_lock_serialises_appenders() -> None:
    gate = PartitionGate()
    order: list[str] = []

    async def appender(name: str) -> None:
        async with gate.append_lock:
            order.append(f"{name} in")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            order.append(f"{name} out")

    await asyncio.gather(appender("a"), appender("b"), appender("c"))
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]


# ------------------------------------------------------------------------ decoded fetches


def _stored(first_offset: int, values: list[bytes | None], **builder: object) -> bytes:
    """A batch as a log stores it: base offset set (not covered by the CRC)."""
    batch = build_batch([(1_000 + i, None, v, ()) for i, v in enumerate(values)], **builder)
    return first_offset.to_bytes(8, "big", signed=True) + batch[8:]


def test_decode_skips_records_below_the_offset_and_control_batches() -> None:
    data = (
        _stored(0, [b"a", b"b", b"c"])
        + _stored(3, [encode_control_key(ControlRecordType.COMMIT)], is_control=True,
                  producer_id=7, producer_epoch=0, is_transactional=True)
        + _stored(4, [None, b"e"])
    )
    response = broker_pb2.FetchResponse()
    next_offset, added, used = _decode_into(response.records, data, 1, 1 << 20)
    assert (next_offset, added, used) == (6, 4, len(data))
    assert [(r.offset, r.HasField("value"), r.value) for r in response.records] == [
        (1, True, b"b"), (2, True, b"c"), (4, False, b""), (5, True, b"e")]
    assert [r.timestamp for r in response.records] == [1_001, 1_002, 1_000, 1_001]
    assert {r.timestamp_type for r in response.records} == {broker_pb2.CREATE_TIME}


def test_decode_stops_after_the_batch_that_passes_max_bytes() -> None:
    batches = [_stored(i * 2, [bytes(100), bytes(100)]) for i in range(4)]
    data = b"".join(batches)
    response = broker_pb2.FetchResponse()
    # 200 bytes of values per batch: the first batch is whole even over the limit ...
    assert _decode_into(response.records, data, 0, 10) == (2, 2, len(batches[0]))
    # ... and a batch that crosses the limit is the last one.
    response = broker_pb2.FetchResponse()
    assert _decode_into(response.records, data, 0, 300) == (4, 4, 2 * len(batches[0]))


def test_a_stored_batch_that_does_not_decode_is_a_storage_error() -> None:
    batch = bytearray(_stored(0, [b"x" * 20]))
    batch[-5] ^= 0xFF  # damage covered by the CRC
    with pytest.raises(StorageError, match="stored batch at fetch position 0"):
        _decode_into(broker_pb2.FetchResponse().records, bytes(batch), 0, 1 << 20)


# ------------------------------------------------------------------------ topic names


def test_topic_names_are_checked_once_and_bad_ones_every_time() -> None:
    service_module._valid_topic_names.clear()
    assert _topic("orders") == "orders"
    assert "orders" in service_module._valid_topic_names
    assert _topic("orders") == "orders"
    for _ in range(2):  # a refused name is never remembered as valid
        with pytest.raises(BadRequestError) as caught:
            _topic("bad/name", "name")
        assert caught.value.field == "name"
        assert caught.value.reason == "INVALID_TOPIC"
        assert "Topic name is invalid" in str(caught.value)
    assert "bad/name" not in service_module._valid_topic_names


def test_remembered_topic_names_are_bounded() -> None:
    service_module._valid_topic_names.clear()
    limit = service_module._VALID_TOPIC_NAMES_MAX
    for i in range(limit + 10):
        _topic(f"topic-{i}")
    assert 0 < len(service_module._valid_topic_names) <= limit
    assert _topic("topic-0") == "topic-0"  # forgotten names are simply checked again


# ------------------------------------------------------------------------ fetch responses


T0 = 1_700_000_000_000


@pytest.fixture
def service(tmp_path: Path) -> Iterator[BrokerService]:
    """A servicer over a real LogManager holding topic "log": 40 batches of 1..4 records over
    several segments, timestamps increasing by batch."""
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("log", 1, {"segment.bytes": "3000", "index.interval.bytes": "200"})
    partition_log = manager.get_log("log", 0)
    for i in range(40):
        partition_log.append(build_batch(
            [(T0 + 10 * i + j, None, b"v" * (i * 13 % 200), ()) for j in range(1 + i % 4)]
        ))
    partition_log.maybe_increment_log_start_offset(2)
    executor = ThreadPoolExecutor(2)
    yield BrokerService(manager, Settings(), ServerMetrics(), executor)
    executor.shutdown()
    manager.close()


def _expected_batches(partition_log: PartitionLog, offset: int, max_bytes: int) -> tuple[bytes, int]:
    """The stored batches a fetch at ``offset`` returns and its next offset, from the log's
    read and the records package's header parser."""
    data = partition_log.read(offset, max_bytes)
    headers = list(iter_batch_headers(data))
    return data, headers[-1].next_offset if headers else offset


@pytest.mark.parametrize("max_bytes", [1, 700, 5_000_000])  # 5 MB: read in the executor
async def test_fetch_by_offset_returns_the_stored_batches_and_what_they_hold(
    service: BrokerService, max_bytes: int
) -> None:
    partition_log = service._log_manager.get_log("log", 0)
    end = partition_log.log_end_offset
    for offset in range(2, end + 1):
        for fetch_format in (broker_pb2.FETCH_FORMAT_RECORD_BATCHES,
                             broker_pb2.FETCH_FORMAT_RECORDS):
            request = broker_pb2.FetchByOffsetRequest(
                topic="log", offset=offset, max_bytes=max_bytes, format=fetch_format
            )
            response = await service.FetchByOffset(request, None)
            data, next_offset = _expected_batches(partition_log, offset, max_bytes)
            assert (response.topic, response.partition) == ("log", 0)
            assert (response.high_watermark, response.log_start_offset) == (end, 2)
            assert (response.matched_offset, response.matched_timestamp) == (-1, -1)
            assert response.next_offset == next_offset, (offset, max_bytes)
            if fetch_format == broker_pb2.FETCH_FORMAT_RECORD_BATCHES:
                assert response.record_batches == data
                assert not response.records
            else:
                assert not response.record_batches
                records = [r for _, batch in iter_batches(data) for r in batch
                           if r.offset >= offset]
                assert [(r.offset, r.timestamp, r.value) for r in response.records] == [
                    (r.offset, r.timestamp, r.value) for r in records
                ]
    # Every record of every raw batch sent is counted once.
    samples = service._metrics.render().decode()
    assert 'stratalog_records_out_total{topic="log"}' in samples


@pytest.mark.parametrize("max_bytes", [1, 700, 5_000_000])
async def test_fetch_by_timestamp_returns_the_batches_from_the_record_found(
    service: BrokerService, max_bytes: int
) -> None:
    partition_log = service._log_manager.get_log("log", 0)
    end = partition_log.log_end_offset
    for timestamp in range(T0, T0 + 10 * 40 + 5, 3):
        request = broker_pb2.FetchByTimestampRequest(
            topic="log", timestamp=timestamp, max_bytes=max_bytes,
            format=broker_pb2.FETCH_FORMAT_RECORD_BATCHES,
        )
        response = await service.FetchByTimestamp(request, None)
        found = partition_log.offset_for_timestamp(timestamp)
        assert (response.high_watermark, response.log_start_offset) == (end, 2)
        if found is None:
            assert (response.matched_offset, response.matched_timestamp) == (-1, -1)
            assert (response.next_offset, response.record_batches) == (end, b"")
            continue
        data, next_offset = _expected_batches(partition_log, found.offset, max_bytes)
        assert (response.matched_offset, response.matched_timestamp) == tuple(
            reversed(found)
        ), timestamp
        assert (response.record_batches, response.next_offset) == (data, next_offset)


class _CountingExecutor(ThreadPoolExecutor):
    """A real thread pool that counts what it was given."""

    def __init__(self) -> None:
        super().__init__(1)
        self.submitted = 0

    def submit(self, *args, **kwargs):  # type: ignore[override]
        self.submitted += 1
        return super().submit(*args, **kwargs)


async def test_large_appends_leave_the_loop_only_while_reads_are_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {})
    manager.create_topic("synced", 1, {"flush.messages": "1"})
    executor = _CountingExecutor()
    settings = Settings(append_in_executor_min_bytes=1000, append_inline_max_bytes=100_000)
    service = BrokerService(manager, settings, ServerMetrics(), executor)

    async def produce(topic: str, value_bytes: int) -> int:
        before = executor.submitted
        batch = build_batch([(T0, None, b"v" * value_bytes, ())])
        request = broker_pb2.ProduceRequest(topic=topic, record_batches=batch)
        await service.Produce(service_module.ProduceRequestView.of_message(request), None)
        return executor.submitted - before

    read = broker_pb2.ListOffsetsRequest(topic="t", timestamp=-1)
    try:
        # No read served yet: below append_inline_max_bytes everything runs inline.
        assert await produce("t", 10) == 0
        assert await produce("t", 5_000) == 0
        assert await produce("t", 200_000) == 1  # at or above the maximum: always the pool
        assert await produce("synced", 10) == 1  # flush.messages: the append may fsync
        # A read was just served: appends of append_in_executor_min_bytes or more go to the
        # pool so that the next reads do not wait behind them; small ones stay inline.
        monkeypatch.setattr(service_module, "_READS_RECENT_S", 3600.0)
        await service.ListOffsets(read, None)
        assert await produce("t", 5_000) == 1
        assert await produce("t", 10) == 0
        # The reads stopped (longer ago than the window): back on the loop.
        monkeypatch.setattr(service_module, "_READS_RECENT_S", 0.0)
        assert await produce("t", 5_000) == 0
        # Fetches count as reads too.
        monkeypatch.setattr(service_module, "_READS_RECENT_S", 3600.0)
        service._last_read_at = -3600.0
        assert await produce("t", 5_000) == 0
        await service.FetchByOffset(broker_pb2.FetchByOffsetRequest(topic="t", offset=0), None)
        assert await produce("t", 5_000) == 1
        assert manager.get_log("t", 0).log_end_offset == 8
    finally:
        executor.shutdown()
        manager.close()


async def test_many_decoded_records_are_encoded_in_the_pool(tmp_path: Path) -> None:
    # Encoding costs ~1 µs a record (and compression on top): a large records-form Produce
    # must not hold the event loop; a small one is encoded inline.
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {})
    executor = _CountingExecutor()
    service = BrokerService(manager, Settings(), ServerMetrics(), executor)

    async def produce(count: int) -> int:
        before = executor.submitted
        request = broker_pb2.ProduceRequest(
            topic="t", records=[_record(value=b"v%d" % i) for i in range(count)],
            compression=broker_pb2.COMPRESSION_ZSTD,
        )
        response = await service.Produce(
            service_module.ProduceRequestView.of_message(request), None
        )
        assert response.record_count == count
        return executor.submitted - before

    try:
        assert await produce(10) == 0
        assert await produce(service_module._ENCODE_IN_EXECUTOR_MIN_RECORDS) == 1
        partition_log = manager.get_log("t", 0)
        values = [r.value for _, batch in iter_batches(partition_log.read(0, 1 << 20))
                  for r in batch]
        assert values == [b"v%d" % i for i in range(10)] + [
            b"v%d" % i for i in range(service_module._ENCODE_IN_EXECUTOR_MIN_RECORDS)]
    finally:
        executor.shutdown()
        manager.close()
