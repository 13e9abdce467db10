"""The servicer's own pieces: request checks, fetch responses, where appends run (through the
serving layer, whose Partition is tested in broker/test_partition.py). (Its translations are
tested in test_translation.py, the placement rule in test_append_placement.py.)

Every RPC is exercised against a real server process in tests/integration/; these tests pin the
parts that do not need one, calling the servicer's RPC methods in-process over a real LogManager.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2, status_pb2

from stratalog.records import build_batch
from stratalog.records.batch import Compression, iter_batch_headers
from stratalog.records.reader import iter_batches
from stratalog.server.append_placement import AppendPlacement
from stratalog.server.broker import ReplicaManager
from stratalog.server.metrics import ServerMetrics
from stratalog.server.rpc.decoding import ProduceRequestView
from stratalog.server.rpc.service import BrokerService
from stratalog.server.settings import Settings
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.topic_name_memo import ValidTopicNames
from stratalog.server.transactions import TransactionCoordinator
from stratalog.v1 import broker_pb2

_coordinators: list[TransactionCoordinator] = []
_executors: list[ThreadPoolExecutor] = []


def _service(manager: LogManager, settings: Settings, metrics: ServerMetrics,
             executor: ThreadPoolExecutor, *, placement: AppendPlacement | None = None,
             **kwargs: object) -> BrokerService:
    """A BrokerService over a serving layer over ``manager``, with a transaction coordinator in
    its log directories whose markers go through the serving layer (closed after the test)."""
    replicas = ReplicaManager(manager, settings, metrics, executor, placement=placement)
    coordinator = TransactionCoordinator.open(manager.log_dirs, replicas.write_txn_markers)
    _coordinators.append(coordinator)
    replicas.verify_transactions_with(coordinator)
    return BrokerService(replicas, settings, metrics, executor, coordinator=coordinator,
                         **kwargs)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _close_coordinators() -> Iterator[None]:
    yield
    while _coordinators:
        _coordinators.pop().close()
    while _executors:
        _executors.pop().shutdown()


def _record(**fields: object) -> broker_pb2.Record:
    headers = fields.pop("headers", [])
    record = broker_pb2.Record(**fields)
    for key, value in headers:  # type: ignore[attr-defined]
        header = record.headers.add(key=key)
        if value is not None:
            header.value = value
    return record


# ------------------------------------------------------------------------ topic names


class _Context:
    """What the servicer's error path uses of a grpc.aio.ServicerContext: the status it aborts
    with, kept for the test (grpc's context cannot be built outside a server)."""

    def __init__(self) -> None:
        self.status: grpc.Status | None = None

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise grpc.aio.AbortError()

    def code(self) -> grpc.StatusCode | None:
        return self.status.code if self.status is not None else None

    def cancelled(self) -> bool:
        return False  # the client never cancels here


def _error_info(status: grpc.Status) -> error_details_pb2.ErrorInfo:
    ((key, value),) = status.trailing_metadata
    assert key == "grpc-status-details-bin"
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(value).details[0].Unpack(info)
    return info


async def test_topic_names_are_checked_once_and_bad_ones_every_time(tmp_path: Path) -> None:
    # The servicer checks names with the memo it was given (the engine's rules), and a bad
    # name is refused naming the request's field, every time.
    names = ValidTopicNames()
    manager = LogManager.open([tmp_path / "data"])
    executor = ThreadPoolExecutor(1)
    service = _service(manager, Settings(), ServerMetrics(), executor, topic_names=names)
    try:
        manager.create_topic("orders", 1, {})
        request = broker_pb2.DescribeTopicRequest(name="orders")
        assert (await service.DescribeTopic(request, None)).topic.name == "orders"
        assert "orders" in names
        assert (await service.DescribeTopic(request, None)).topic.name == "orders"
        for _ in range(2):  # a refused name is never remembered as valid
            context = _Context()
            with pytest.raises(grpc.aio.AbortError):
                await service.DescribeTopic(
                    broker_pb2.DescribeTopicRequest(name="bad/name"), context
                )
            assert context.status is not None
            assert context.status.code is grpc.StatusCode.INVALID_ARGUMENT
            assert context.status.details.startswith("name: Topic name is invalid")
            info = _error_info(context.status)
            assert (info.reason, dict(info.metadata)) == ("INVALID_TOPIC", {"field": "name"})
        assert "bad/name" not in names
        context = _Context()
        with pytest.raises(grpc.aio.AbortError):  # the field of a data RPC is "topic"
            await service.ListOffsets(broker_pb2.ListOffsetsRequest(topic=".."), context)
        assert context.status is not None
        assert dict(_error_info(context.status).metadata) == {"field": "topic"}
    finally:
        executor.shutdown()
        manager.close()


# ------------------------------------------------------------------------ fetch responses


T0 = 1_700_000_000_000


class Served(NamedTuple):
    """A servicer and what the test built it over."""

    service: BrokerService
    log_manager: LogManager
    metrics: ServerMetrics


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
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
    metrics = ServerMetrics()
    yield Served(_service(manager, Settings(), metrics, executor), manager, metrics)
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
    served: Served, max_bytes: int
) -> None:
    service = served.service
    partition_log = served.log_manager.get_log("log", 0)
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
    samples = served.metrics.render().decode()
    assert 'stratalog_records_out_total{topic="log"}' in samples


@pytest.mark.parametrize("max_bytes", [1, 700, 5_000_000])
async def test_fetch_by_timestamp_returns_the_batches_from_the_record_found(
    served: Served, max_bytes: int
) -> None:
    service = served.service
    partition_log = served.log_manager.get_log("log", 0)
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


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _produce_request(topic: str, batch: bytes) -> ProduceRequestView:
    return ProduceRequestView.of_message(
        broker_pb2.ProduceRequest(topic=topic, record_batches=batch)
    )


async def test_large_appends_leave_the_loop_only_while_reads_are_served(tmp_path: Path) -> None:
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {})
    manager.create_topic("synced", 1, {"flush.messages": "1"})
    executor = _CountingExecutor()
    settings = Settings(append_in_executor_min_bytes=1000, append_inline_max_bytes=100_000)
    clock = Clock()
    service = _service(manager, settings, ServerMetrics(), executor,
                            placement=AppendPlacement(settings, clock=clock))

    async def produce(topic: str, value_bytes: int) -> int:
        before = executor.submitted
        batch = build_batch([(T0, None, b"v" * value_bytes, ())])
        await service.Produce(_produce_request(topic, batch), None)
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
        await service.ListOffsets(read, None)
        assert await produce("t", 5_000) == 1
        assert await produce("t", 10) == 0
        # The reads stopped (longer ago than the window): back on the loop.
        clock.now_s += 3600
        assert await produce("t", 5_000) == 0
        # Fetches count as reads too.
        assert await produce("t", 5_000) == 0
        await service.FetchByOffset(broker_pb2.FetchByOffsetRequest(topic="t", offset=0), None)
        assert await produce("t", 5_000) == 1
        assert manager.get_log("t", 0).log_end_offset == 8
    finally:
        executor.shutdown()
        manager.close()


async def test_fetches_that_can_return_little_are_read_on_the_loop(tmp_path: Path) -> None:
    # max_bytes (1 MiB by default) allows a large read, but the partition holds less past the
    # offset: nothing at the log end (a long poll, a subscriber at the end), a small active
    # segment. Those reads stay on the loop; a burst of them must not queue in the pool ahead
    # of other clients' reads. Reads in older segments, or in a large active one, go there.
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {"segment.bytes": "600000"})
    partition_log = manager.get_log("t", 0)
    executor = _CountingExecutor()
    settings = Settings()  # read_in_executor_min_bytes 256 KiB, fetch_max_bytes_default 1 MiB
    service = _service(manager, settings, ServerMetrics(), executor)

    async def pool_reads(offset: int, **fields: int) -> int:
        before = executor.submitted
        await service.FetchByOffset(
            broker_pb2.FetchByOffsetRequest(topic="t", offset=offset, **fields), _StreamContext())
        return executor.submitted - before

    try:
        assert await pool_reads(0) == 0  # an empty log
        assert await pool_reads(0, max_wait_ms=10) == 0  # a long poll that waited, read twice
        for i in range(2):
            partition_log.append(build_batch([(T0 + i, None, b"v" * 100_000, ())]))
        assert await pool_reads(0) == 0  # 200 KB in the active segment: a small read ...
        assert await pool_reads(1, max_bytes=1_000_000) == 0
        partition_log.append(build_batch([(T0, None, b"v" * 100_000, ())]))
        assert await pool_reads(0) == 1  # ... 300 KB, more than 256 KiB: the pool
        assert await pool_reads(0, max_bytes=100_000) == 0  # max_bytes says it is small
        assert await pool_reads(3) == 0  # at the end
        partition_log.roll()
        assert await pool_reads(0, max_bytes=1_000_000) == 1  # an older segment: unknown
        assert await pool_reads(3) == 0  # the new active segment is empty
    finally:
        executor.shutdown()
        manager.close()


async def test_many_decoded_records_are_encoded_in_the_pool(tmp_path: Path) -> None:
    # Encoding costs ~1 µs a record (and compression on top): a large records-form Produce
    # must not hold the event loop; a small one is encoded inline.
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {})
    executor = _CountingExecutor()
    service = _service(manager, Settings(), ServerMetrics(), executor)
    many = AppendPlacement.ENCODE_IN_EXECUTOR_MIN_RECORDS

    async def produce(count: int) -> int:
        before = executor.submitted
        request = broker_pb2.ProduceRequest(
            topic="t", records=[_record(value=b"v%d" % i) for i in range(count)],
            compression=broker_pb2.COMPRESSION_ZSTD,
        )
        response = await service.Produce(ProduceRequestView.of_message(request), None)
        assert response.record_count == count
        return executor.submitted - before

    try:
        assert await produce(10) == 0
        assert await produce(many) == 1
        partition_log = manager.get_log("t", 0)
        values = [r.value for _, batch in iter_batches(partition_log.read(0, 1 << 20))
                  for r in batch]
        assert values == [b"v%d" % i for i in range(10)] + [b"v%d" % i for i in range(many)]
    finally:
        executor.shutdown()
        manager.close()


async def test_compressed_client_batches_are_validated_in_the_pool_whatever_their_size(
    tmp_path: Path,
) -> None:
    # Their validation decompresses them: a few bytes of zstd may hold 64 MiB (issue 13,
    # defect 2), so no compressed request is validated on the event loop.
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {})
    executor = _CountingExecutor()
    service = _service(manager, Settings(), ServerMetrics(), executor,
                       placement=AppendPlacement(Settings(), clock=Clock()))

    async def produce(batch: bytes) -> int:
        before = executor.submitted
        await service.Produce(_produce_request("t", batch), None)
        return executor.submitted - before

    plain = build_batch([(T0, None, b"v", ())])
    zstd = build_batch([(T0, None, b"v", ())], compression=Compression.ZSTD)
    try:
        assert await produce(plain) == 0
        assert await produce(zstd) == 1
        assert await produce(plain + zstd) == 1  # one compressed batch is enough
        assert await produce(plain * 2) == 0
        assert manager.get_log("t", 0).log_end_offset == 6
    finally:
        executor.shutdown()
        manager.close()


async def test_records_form_produce_of_many_bytes_is_encoded_in_the_pool(tmp_path: Path) -> None:
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {})
    executor = _CountingExecutor()
    settings = Settings(append_inline_max_bytes=100_000)
    service = _service(manager, settings, ServerMetrics(), executor,
                       placement=AppendPlacement(settings, clock=Clock()))

    async def produce(value_bytes: int) -> int:
        before = executor.submitted
        request = broker_pb2.ProduceRequest(
            topic="t", records=[_record(value=b"\0" * value_bytes)],
            compression=broker_pb2.COMPRESSION_ZSTD,
        )
        await service.Produce(ProduceRequestView.of_message(request), None)
        return executor.submitted - before

    try:
        assert await produce(10) == 0
        # One record of zeros: a few bytes compressed, but compressing and checking it is
        # the work of its 200 kB: the encoding and the append both leave the loop.
        assert await produce(200_000) == 2
        assert manager.get_log("t", 0).log_end_offset == 2
    finally:
        executor.shutdown()
        manager.close()


async def test_appends_that_roll_finish_in_the_pool_and_reads_stay_correct(
    tmp_path: Path,
) -> None:
    # Small appends are tried inline; the ones that must roll a segment (create and trim
    # files) come back from storage undone and are finished in the pool.
    manager = LogManager.open([tmp_path / "data"])
    manager.create_topic("t", 1, {"segment.bytes": "2000", "index.interval.bytes": "200"})
    executor = _CountingExecutor()
    service = _service(manager, Settings(), ServerMetrics(), executor)
    produced: list[bytes] = []
    try:
        for i in range(60):
            values = [b"%d.%d:" % (i, j) * (1 + i % 20) for j in range(1 + i % 3)]
            batch = build_batch([(T0 + i, None, value, ()) for value in values])
            response = await service.Produce(_produce_request("t", batch), None)
            assert (response.base_offset, response.record_count) == (len(produced), len(values))
            produced += values
        partition_log = manager.get_log("t", 0)
        rolls = len(partition_log.segments) - 1
        assert rolls >= 5
        # Every append that rolled went to the pool; so may one that found the log's lock held
        # by the flush Kafka schedules after each roll (the LogManager's flusher thread takes it
        # twice), and no other.
        assert rolls <= executor.submitted <= 3 * rolls
        for offset in range(len(produced)):
            response = await service.FetchByOffset(broker_pb2.FetchByOffsetRequest(
                topic="t", offset=offset, max_bytes=1, format=broker_pb2.FETCH_FORMAT_RECORDS,
            ), None)
            assert response.records[0].offset == offset
            assert response.records[0].value == produced[offset]
        raw = await service.FetchByOffset(broker_pb2.FetchByOffsetRequest(
            topic="t", offset=0, max_bytes=1 << 20,
            format=broker_pb2.FETCH_FORMAT_RECORD_BATCHES), None)
        assert raw.record_batches == partition_log.read(0, 1 << 20)
    finally:
        executor.shutdown()
        manager.close()


class _HeldClock:
    """The LogManager's wall clock; in the thread named by ``hold_in`` it waits until
    ``release`` is set, so a maintenance call there stops where it first reads the time."""

    def __init__(self) -> None:
        self.hold_in: int | None = None
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> int:
        if threading.get_ident() == self.hold_in:
            self.held.set()
            self.release.wait(5)
        return T0


async def test_an_append_never_waits_on_the_loop_for_maintenance(tmp_path: Path) -> None:
    # Retention runs in a maintenance thread and holds the log's lock (it stops where it
    # reads the clock, under the lock). An append arriving meanwhile goes to the pool to wait
    # there: the loop goes on serving reads.
    clock = _HeldClock()
    manager = LogManager.open([tmp_path / "data"], time_ms=clock)
    manager.create_topic("t", 1, {})
    executor = _CountingExecutor()
    service = _service(manager, Settings(), ServerMetrics(), executor)
    partition_log = manager.get_log("t", 0)
    batch = build_batch([(T0, None, b"v", ())])

    def retention() -> None:
        clock.hold_in = threading.get_ident()
        partition_log.delete_old_segments()

    try:
        await service.Produce(_produce_request("t", batch), None)
        assert executor.submitted == 0  # inline while nothing holds the lock
        maintenance = threading.Thread(target=retention)
        maintenance.start()
        assert clock.held.wait(5)
        produce = asyncio.create_task(service.Produce(_produce_request("t", batch), None))
        await asyncio.sleep(0.05)
        latest = await service.ListOffsets(
            broker_pb2.ListOffsetsRequest(topic="t", timestamp=-1), None
        )
        assert latest.offset == 1  # served while the append waits
        assert not produce.done()
        assert executor.submitted == 1
        clock.release.set()
        response = await asyncio.wait_for(produce, 5)
        maintenance.join(5)
        assert response.base_offset == 1
        assert partition_log.log_end_offset == 2
    finally:
        clock.release.set()
        executor.shutdown()
        manager.close()


# ------------------------------------------------------------------------ waiting RPCs


class _StreamContext(_Context):
    """A Subscribe's context whose client reads only when the test lets it: each ``write``
    waits until the test released one message (gRPC's flow control, in the test's hands)."""

    def __init__(self, peer: str = "ipv4:10.0.0.1:5000") -> None:
        super().__init__()
        self._peer = peer
        self.messages: list[broker_pb2.FetchResponse] = []
        self.written_bytes: list[int] = []
        self.reads = asyncio.Semaphore(0)

    def peer(self) -> str:
        return self._peer

    async def write(self, message: bytes) -> None:
        assert type(message) is bytes  # serialized by the servicer: nothing else held
        self.written_bytes.append(len(message))
        await self.reads.acquire()
        self.messages.append(broker_pb2.FetchResponse.FromString(message))


def _limited_service(served: Served, **limits: int) -> BrokerService:
    """A servicer over ``served``'s logs with these settings (and a pool of its own, shut down
    after the test)."""
    settings = Settings(**limits)  # type: ignore[arg-type]
    executor = ThreadPoolExecutor(1)
    _executors.append(executor)
    return _service(served.log_manager, settings, served.metrics, executor)


async def _until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def test_stalled_streams_hold_the_budget_and_others_go_on_one_batch_per_message(
    served: Served,
) -> None:
    partition_log = served.log_manager.get_log("log", 0)
    end = partition_log.log_end_offset
    request = broker_pb2.SubscribeRequest(
        topic="log", offset=2, format=broker_pb2.FETCH_FORMAT_RECORD_BATCHES
    )
    # While the budget lasts, a message holds every batch the read reached.
    roomy = _limited_service(served)
    first = _StreamContext()
    task = asyncio.create_task(roomy.Subscribe(request, first))
    first.reads.release()
    await _until(lambda: first.messages, "a first message")
    assert len(list(iter_batch_headers(first.messages[0].record_batches))) > 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    service = _limited_service(served, subscribe_buffer_bytes_total=1)
    budget = service._subscribe_budget
    stalled, reader = _StreamContext("ipv4:10.0.0.1:1"), _StreamContext("ipv4:10.0.0.2:1")
    stalled_task = asyncio.create_task(service.Subscribe(request, stalled))
    await _until(lambda: stalled.written_bytes, "the stalled stream's first message")
    # Its client reads nothing: the stream holds that one message (one batch: the budget is
    # all but nothing), and the budget counts it.
    assert budget.in_use_bytes == stalled.written_bytes[0] > 1
    reader_task = asyncio.create_task(service.Subscribe(request, reader))
    next_offset = 2
    while next_offset < end:
        reader.reads.release()
        count = len(reader.messages)
        await _until(lambda: len(reader.messages) > count,  # noqa: B023 (awaited at once)
                     "the reader's next message")
        message = reader.messages[-1]
        # One batch per message while the stalled stream holds the budget: never stopped.
        (batch,) = list(iter_batch_headers(message.record_batches))
        assert batch.next_offset == message.next_offset
        next_offset = message.next_offset
    # The reader is at the end, waiting for appends: it holds no lease.
    await _until(lambda: budget.leases == 1, "the reader idle, without a lease")
    assert budget.in_use_bytes == stalled.written_bytes[0]
    assert service._limits.total == 2
    for task in (stalled_task, reader_task):
        task.cancel()
    await asyncio.gather(stalled_task, reader_task, return_exceptions=True)
    assert (budget.in_use_bytes, budget.leases, service._limits.total) == (0, 0, 0)
    budget.check()
    service._limits.check()


async def test_a_subscribe_beyond_the_connections_limit_is_refused_naming_it(
    served: Served,
) -> None:
    service = _limited_service(served, waiting_rpcs_per_connection_max=1)
    first, second, other = (_StreamContext("ipv4:10.0.0.1:7"), _StreamContext("ipv4:10.0.0.1:7"),
                            _StreamContext("ipv4:10.0.0.1:8"))
    request = broker_pb2.SubscribeRequest(topic="log", offset=2)
    first_task = asyncio.create_task(service.Subscribe(request, first))
    await _until(lambda: first.written_bytes, "the first stream's message")
    with pytest.raises(grpc.aio.AbortError):
        await service.Subscribe(request, second)
    assert second.status is not None
    assert second.status.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    info = _error_info(second.status)
    assert (info.reason, dict(info.metadata)) == (
        "RESOURCE_LIMIT_EXCEEDED", {"limit": "waiting_rpcs_per_connection_max"})
    # A bad request is refused for what it is, not for the limit.
    with pytest.raises(grpc.aio.AbortError):
        await service.Subscribe(broker_pb2.SubscribeRequest(topic="log"), second)
    assert second.status.code is grpc.StatusCode.INVALID_ARGUMENT
    # Another connection of the same host is within the (per-host) client limit of 256.
    other_task = asyncio.create_task(service.Subscribe(request, other))
    await _until(lambda: other.written_bytes, "the other connection's message")
    for task in (first_task, other_task):
        task.cancel()
    await asyncio.gather(first_task, other_task, return_exceptions=True)
    assert service._limits.total == 0
    text = served.metrics.render().decode()
    assert ('stratalog_waiting_rpcs_refused_total{limit="waiting_rpcs_per_connection_max"} 1.0'
            in text)


async def test_a_long_poll_takes_a_slot_only_while_it_waits(served: Served) -> None:
    service = _limited_service(served, waiting_rpcs_per_client_max=1)
    partition_log = served.log_manager.get_log("log", 0)
    end = partition_log.log_end_offset
    at_end = broker_pb2.FetchByOffsetRequest(topic="log", offset=end, max_wait_ms=20_000)
    waiting = asyncio.create_task(service.FetchByOffset(at_end, _StreamContext("ipv4:10.0.0.1:1")))
    await _until(lambda: service._limits.total == 1, "the long poll waiting")
    # A second long poll of the same host, on another connection: refused when it would wait.
    refused = _StreamContext("ipv4:10.0.0.1:2")
    with pytest.raises(grpc.aio.AbortError):
        await service.FetchByOffset(at_end, refused)
    assert refused.status is not None
    assert _error_info(refused.status).metadata["limit"] == "waiting_rpcs_per_client_max"
    assert "long poll refused" in refused.status.details
    # One that finds its data at once never waits, and is never refused.
    found = await service.FetchByOffset(
        broker_pb2.FetchByOffsetRequest(topic="log", offset=2, max_wait_ms=20_000),
        _StreamContext("ipv4:10.0.0.1:3"),
    )
    assert found.records
    # An append answers the waiting poll, and its slot is free again.
    batch = build_batch([(T0 + 1000, None, b"new", ())])
    await service.Produce(_produce_request("log", batch), _StreamContext())
    response = await waiting
    assert response.next_offset == end + 1
    assert service._limits.total == 0
    service._limits.check()
