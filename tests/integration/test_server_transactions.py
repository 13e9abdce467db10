"""Exactly-once against a real server process: idempotent produce, transactions, read_committed.

Every call goes through the generated ``BrokerStub`` on a ``grpc.aio`` channel; producer batches
are built with ``stratalog.records.BatchBuilder`` as a producer builds them. The module's server
checks for timed-out transactions every 100 ms (set through its environment, the documented
``STRATALOG_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS``), so a test that lets a
transaction time out waits for it with a generous deadline, never with a timed assertion.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio
import pytest

from stratalog.client.errors import StratalogError, from_rpc_error
from stratalog.records import BatchBuilder, ControlRecordType, decode_control_key, iter_batches
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import ServerProcess, launch_server, until

# Record timestamps a minute in the past: markers carry the server's clock, and a segment whose
# records are older than segment.ms (7 days) would roll at each marker (Kafka's rule), which
# would split the reads below across segments.
T0 = int(time.time() * 1000) - 60_000
TIMEOUT = 30
#: The server's environment: timeout aborts checked every 100 ms, maintenance every 50 ms.
QUICK_ABORTS_ENV = {
    "STRATALOG_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "100",
    "STRATALOG_MAINTENANCE_INTERVAL_MS": "50",
}
RECORD_BATCHES = pb.FETCH_FORMAT_RECORD_BATCHES
COMMITTED = pb.READ_COMMITTED


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """This module's server (in place of conftest's): quick timeout aborts."""
    data_dir = tmp_path_factory.mktemp("txn-server") / "data"
    process = launch_server(data_dir, env=QUICK_ABORTS_ENV)
    yield process
    code = process.stop(signal.SIGTERM)
    assert code == 0, f"server exited {code} on SIGTERM; log:\n{process.log_text()[-4000:]}"


@pytest.fixture
async def stub(server: ServerProcess) -> AsyncIterator[broker_pb2_grpc.BrokerStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


async def error_of(call: Awaitable[object]) -> StratalogError:
    """The error a failing call gives, as the client sees it (code, reason, metadata)."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return from_rpc_error(caught.value)


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until ``check()`` holds, for at most 30 s (a deadline, not a timing)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not await check():
        if loop.time() > deadline:
            pytest.fail(f"{what}: not within {TIMEOUT} s")
        await asyncio.sleep(0.05)


def batch(values: list[bytes], *, producer_id: int = -1, epoch: int = -1, sequence: int = -1,
          transactional: bool = False) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch,
                           base_sequence=sequence, is_transactional=transactional)
    for index, value in enumerate(values):
        builder.append(T0 + index, None, value, ())
    return builder.build()


async def create(stub, topic: str, partitions: int = 1) -> None:
    await stub.CreateTopic(pb.CreateTopicRequest(name=topic, partitions=partitions),
                           timeout=TIMEOUT)


async def produce(stub, topic: str, payload: bytes, partition: int = 0) -> pb.ProduceResponse:
    return await stub.Produce(
        pb.ProduceRequest(topic=topic, partition=partition, record_batches=payload),
        timeout=TIMEOUT)


async def fetch(stub, topic: str, offset: int = 0, *, isolation: int = pb.READ_UNCOMMITTED,
                fmt: int = pb.FETCH_FORMAT_RECORDS, partition: int = 0) -> pb.FetchResponse:
    return await stub.FetchByOffset(pb.FetchByOffsetRequest(
        topic=topic, partition=partition, offset=offset, max_bytes=1 << 20, format=fmt,
        isolation_level=isolation), timeout=TIMEOUT)


async def latest(stub, topic: str, isolation: int = pb.READ_UNCOMMITTED) -> int:
    response = await stub.ListOffsets(
        pb.ListOffsetsRequest(topic=topic, timestamp=-1, isolation_level=isolation),
        timeout=TIMEOUT)
    return response.offset


def control_types(record_batches: bytes) -> list[tuple[int, ControlRecordType]]:
    """(offset, COMMIT/ABORT) of each control batch in raw fetched batches."""
    return [(header.base_offset, decode_control_key(records[0].key)[1])
            for header, records in iter_batches(record_batches) if header.is_control]


@dataclass
class Producer:
    """A transactional producer, as a client drives the RPCs: one sequence per partition."""

    stub: broker_pb2_grpc.BrokerStub
    transactional_id: str
    producer_id: int = -1
    epoch: int = -1
    sequences: dict[tuple[str, int], int] = field(default_factory=dict)

    async def init(self, timeout_ms: int = 0) -> Producer:
        response = await self.stub.InitProducerId(pb.InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=timeout_ms),
            timeout=TIMEOUT)
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        self.sequences.clear()  # a new epoch starts every partition at sequence 0
        return self

    @property
    def ids(self) -> dict[str, object]:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch}

    def add(self, *partitions: tuple[str, int]) -> Awaitable[pb.AddPartitionsToTxnResponse]:
        return self.stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
            **self.ids, partitions=[pb.TopicPartition(topic=t, partition=p)
                                    for t, p in partitions]), timeout=TIMEOUT)

    def batch(self, topic: str, partition: int, values: list[bytes]) -> bytes:
        sequence = self.sequences.get((topic, partition), 0)
        self.sequences[(topic, partition)] = sequence + len(values)
        return batch(values, producer_id=self.producer_id, epoch=self.epoch, sequence=sequence,
                     transactional=True)

    async def send(self, topic: str, values: list[bytes], partition: int = 0) -> pb.ProduceResponse:
        return await produce(self.stub, topic, self.batch(topic, partition, values), partition)

    def end(self, commit: bool) -> Awaitable[pb.EndTxnResponse]:
        return self.stub.EndTxn(pb.EndTxnRequest(**self.ids, commit=commit), timeout=TIMEOUT)

    def describe(self) -> Awaitable[pb.DescribeTransactionResponse]:
        return self.stub.DescribeTransaction(
            pb.DescribeTransactionRequest(transactional_id=self.transactional_id),
            timeout=TIMEOUT)


# ------------------------------------------------------------------------ idempotent produce


async def test_a_resent_batch_is_answered_with_the_original_offsets_and_stored_once(stub) -> None:
    await create(stub, "idem")
    await produce(stub, "idem", batch([b"before"]))
    producer = await stub.InitProducerId(pb.InitProducerIdRequest(), timeout=TIMEOUT)
    assert producer.producer_epoch == 0
    first = batch([b"a", b"b"], producer_id=producer.producer_id, epoch=0, sequence=0)
    original = await produce(stub, "idem", first)
    assert (original.base_offset, original.last_offset, original.duplicate) == (1, 2, False)
    again = await produce(stub, "idem", first)  # a retry after a lost answer
    assert (again.base_offset, again.last_offset, again.record_count) == (1, 2, 2)
    assert again.duplicate
    response = await fetch(stub, "idem")
    assert [r.value for r in response.records] == [b"before", b"a", b"b"]
    assert response.high_watermark == 3
    # The records form with producer fields: the server encodes the same kind of batch.
    request = pb.ProduceRequest(topic="idem", records=[pb.Record(value=b"c")],
                                producer_id=producer.producer_id, producer_epoch=0,
                                base_sequence=2)
    assert (await stub.Produce(request, timeout=TIMEOUT)).base_offset == 3
    resent = await stub.Produce(request, timeout=TIMEOUT)
    assert (resent.base_offset, resent.duplicate) == (3, True)
    assert await latest(stub, "idem") == 4


async def test_a_sequence_gap_is_out_of_order_and_writes_nothing(stub) -> None:
    await create(stub, "idem-gap")
    producer = await stub.InitProducerId(pb.InitProducerIdRequest(), timeout=TIMEOUT)
    pid = producer.producer_id
    await produce(stub, "idem-gap", batch([b"0", b"1"], producer_id=pid, epoch=0, sequence=0))
    error = await error_of(produce(stub, "idem-gap",
                                   batch([b"5"], producer_id=pid, epoch=0, sequence=5)))
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION,
                                          "OUT_OF_ORDER_SEQUENCE")
    assert not error.retriable
    assert await latest(stub, "idem-gap") == 2
    # The next sequence in order is still accepted.
    await produce(stub, "idem-gap", batch([b"2"], producer_id=pid, epoch=0, sequence=2))
    assert await latest(stub, "idem-gap") == 3


async def test_every_batch_in_flight_at_a_sigterm_is_a_duplicate_after_the_restart(
        start_server) -> None:
    # A producer whose session broke at the stop resends its in-flight batches, oldest first,
    # to the restarted server. The snapshot of the clean close keeps each producer's last batch
    # only: the older ones must still be answered as duplicates (not OUT_OF_ORDER_SEQUENCE,
    # after which a client restarts its sequences and stores them a second time).
    first = start_server()
    async with grpc.aio.insecure_channel(first.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await create(stub, "idem-restart")
        pid = (await stub.InitProducerId(pb.InitProducerIdRequest(), timeout=TIMEOUT)).producer_id
        sent = [batch([b"%d" % n, b"%d" % (n + 1)], producer_id=pid, epoch=0, sequence=n)
                for n in range(0, 10, 2)]
        originals = [await produce(stub, "idem-restart", payload) for payload in sent]
    assert first.stop(signal.SIGTERM) == 0
    second = start_server()
    async with grpc.aio.insecure_channel(second.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for payload, original in zip(sent, originals, strict=True):
            resent = await produce(stub, "idem-restart", payload)
            assert resent.duplicate
            assert (resent.base_offset, resent.last_offset) == (
                original.base_offset, original.last_offset)
        assert await latest(stub, "idem-restart") == 10
        await produce(stub, "idem-restart", batch([b"10"], producer_id=pid, epoch=0, sequence=10))
        response = await fetch(stub, "idem-restart")
        assert [r.value for r in response.records] == [b"%d" % n for n in range(11)]


# ------------------------------------------------------------------------ fencing


async def test_a_second_init_producer_id_fences_the_first_instance(stub) -> None:
    await create(stub, "fence")
    zombie = await Producer(stub, "fence-t").init()
    current = await Producer(stub, "fence-t").init()
    assert current.producer_id == zombie.producer_id
    assert current.epoch == zombie.epoch + 1
    error = await error_of(zombie.add(("fence", 0)))
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PRODUCER_FENCED")
    await current.add(("fence", 0))
    # A batch of the fenced epoch on a partition of the current transaction: refused as Kafka
    # refuses a zombie's produce.
    error = await error_of(zombie.send("fence", [b"zombie"]))
    assert error.reason == "INVALID_PRODUCER_EPOCH"
    assert f"epoch {zombie.epoch}" in str(error)
    await current.send("fence", [b"current"])
    await current.end(commit=True)
    response = await fetch(stub, "fence", isolation=COMMITTED)
    assert [r.value for r in response.records] == [b"current"]


# ------------------------------------------------------------------------ transactional produce


async def test_a_transactional_batch_on_a_partition_not_added_is_refused(stub) -> None:
    await create(stub, "orders", partitions=2)
    producer = await Producer(stub, "x").init()
    await producer.add(("orders", 0))
    error = await error_of(produce(stub, "orders", producer.batch("orders", 1, [b"v"]), 1))
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION,
                                          "INVALID_TXN_STATE")
    assert (f"partition orders-1 was not added to the transaction of producer "
            f"{producer.producer_id} (transactional id 'x'") in str(error)
    assert "call AddPartitionsToTxn first" in str(error)
    assert await latest(stub, "orders") == 0
    response = await stub.ListOffsets(pb.ListOffsetsRequest(topic="orders", partition=1,
                                                            timestamp=-1), timeout=TIMEOUT)
    assert response.offset == 0  # nothing written, and no transaction left open there
    # Without any transaction open at all, the same.
    await producer.end(commit=False)
    error = await error_of(produce(stub, "orders", producer.batch("orders", 0, [b"late"])))
    assert error.reason == "INVALID_TXN_STATE"


async def test_a_transactional_batch_of_an_idempotent_producer_is_refused(stub) -> None:
    await create(stub, "not-txn")
    producer = await stub.InitProducerId(pb.InitProducerIdRequest(), timeout=TIMEOUT)
    payload = batch([b"v"], producer_id=producer.producer_id, epoch=0, sequence=0,
                    transactional=True)
    error = await error_of(produce(stub, "not-txn", payload))
    assert error.reason == "INVALID_PRODUCER_ID_MAPPING"
    assert await latest(stub, "not-txn") == 0


async def test_a_control_batch_from_a_client_is_refused(stub) -> None:
    await create(stub, "no-markers")
    builder = BatchBuilder(producer_id=1, producer_epoch=0, is_transactional=True,
                           is_control=True)
    builder.append(T0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", ())
    error = await error_of(produce(stub, "no-markers", builder.build()))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_RECORD")
    assert "clients are not allowed to write control records" in str(error)


async def test_commit_and_abort_write_markers_and_read_committed_sees_only_commits(stub) -> None:
    await create(stub, "txn-log")
    committer = await Producer(stub, "committer").init()
    aborter = await Producer(stub, "aborter").init()
    await committer.add(("txn-log", 0))
    await aborter.add(("txn-log", 0))
    await committer.send("txn-log", [b"c1"])          # 0
    await aborter.send("txn-log", [b"a1", b"a2"])     # 1-2
    await produce(stub, "txn-log", batch([b"plain"]))  # 3
    # Two transactions open: the LSO is the first offset of the earliest.
    assert await latest(stub, "txn-log", COMMITTED) == 0
    assert await latest(stub, "txn-log") == 4
    open_fetch = await fetch(stub, "txn-log", isolation=COMMITTED)
    assert (list(open_fetch.records), open_fetch.last_stable_offset,
            open_fetch.high_watermark, open_fetch.next_offset) == ([], 0, 4, 0)
    await committer.send("txn-log", [b"c2"])          # 4
    await aborter.end(commit=False)                   # marker at 5
    await committer.end(commit=True)                  # marker at 6
    assert await latest(stub, "txn-log", COMMITTED) == await latest(stub, "txn-log") == 7

    raw = await fetch(stub, "txn-log", fmt=RECORD_BATCHES, isolation=COMMITTED)
    assert control_types(raw.record_batches) == [(5, ControlRecordType.ABORT),
                                                 (6, ControlRecordType.COMMIT)]
    assert [(t.producer_id, t.first_offset) for t in raw.aborted_transactions] == [
        (aborter.producer_id, 1)]
    assert raw.last_stable_offset == raw.high_watermark == 7
    # READ_UNCOMMITTED raw batches carry no aborted transactions (the reader keeps everything).
    raw_uncommitted = await fetch(stub, "txn-log", fmt=RECORD_BATCHES)
    assert raw_uncommitted.record_batches == raw.record_batches
    assert list(raw_uncommitted.aborted_transactions) == []

    committed = await fetch(stub, "txn-log", isolation=COMMITTED)
    assert [(r.offset, r.value) for r in committed.records] == [
        (0, b"c1"), (3, b"plain"), (4, b"c2")]
    assert committed.next_offset == 7
    uncommitted = await fetch(stub, "txn-log")
    assert [r.value for r in uncommitted.records] == [b"c1", b"a1", b"a2", b"plain", b"c2"]
    # Started inside the aborted transaction: still hidden.
    assert [r.value for r in (await fetch(stub, "txn-log", 2, isolation=COMMITTED)).records] == [
        b"plain", b"c2"]


async def test_a_read_committed_fetch_cut_at_an_open_transaction_answers_what_is_below_it(
    stub,
) -> None:
    # The cut keeps a view of the read (fetch_isolation.py): over the wire, the batches below
    # the LSO as stored, in both formats, and the same records as a session's reader gets.
    await create(stub, "txn-cut")
    await produce(stub, "txn-cut", batch([b"p0"]))          # 0
    await produce(stub, "txn-cut", batch([b"p1", b"p2"]))   # 1-2
    opener = await Producer(stub, "opener").init()
    await opener.add(("txn-cut", 0))
    await opener.send("txn-cut", [b"t3"])                   # 3: the LSO
    await produce(stub, "txn-cut", batch([b"p4"]))          # 4
    raw = await fetch(stub, "txn-cut", fmt=RECORD_BATCHES, isolation=COMMITTED)
    whole = await fetch(stub, "txn-cut", fmt=RECORD_BATCHES)
    assert (raw.next_offset, raw.last_stable_offset, raw.high_watermark) == (3, 3, 5)
    assert [header.base_offset for header, _ in iter_batches(raw.record_batches)] == [0, 1]
    assert whole.record_batches.startswith(raw.record_batches)
    assert len(raw.record_batches) < len(whole.record_batches)
    records = await fetch(stub, "txn-cut", isolation=COMMITTED)
    assert [(r.offset, r.value) for r in records.records] == [(0, b"p0"), (1, b"p1"), (2, b"p2")]
    assert records.next_offset == 3
    from_one = await fetch(stub, "txn-cut", 1, fmt=RECORD_BATCHES, isolation=COMMITTED)
    assert from_one.record_batches == raw.record_batches[len(batch([b"p0"])):]


async def test_records_form_transactional_produce(stub) -> None:
    await create(stub, "txn-records")
    producer = await Producer(stub, "records-form").init()
    await producer.add(("txn-records", 0))

    def request(values: list[bytes], sequence: int) -> pb.ProduceRequest:
        return pb.ProduceRequest(
            topic="txn-records", records=[pb.Record(value=v) for v in values],
            producer_id=producer.producer_id, producer_epoch=producer.epoch,
            base_sequence=sequence, transactional=True)

    await stub.Produce(request([b"x", b"y"], 0), timeout=TIMEOUT)
    assert (await stub.Produce(request([b"x", b"y"], 0), timeout=TIMEOUT)).duplicate
    assert await latest(stub, "txn-records", COMMITTED) == 0
    await producer.end(commit=False)
    assert await latest(stub, "txn-records", COMMITTED) == 3
    assert list((await fetch(stub, "txn-records", isolation=COMMITTED)).records) == []
    raw = await fetch(stub, "txn-records", fmt=RECORD_BATCHES)
    headers = [header for header, _ in iter_batches(raw.record_batches)]
    assert [(h.producer_id, h.is_transactional, h.is_control) for h in headers] == [
        (producer.producer_id, True, False), (producer.producer_id, True, True)]


async def test_read_committed_timestamp_lookups_stop_at_the_lso(stub) -> None:
    await create(stub, "txn-time")
    await produce(stub, "txn-time", batch([b"early"]))  # T0 at offset 0
    producer = await Producer(stub, "timed").init()
    await producer.add(("txn-time", 0))
    await producer.send("txn-time", [b"open-1", b"open-2"])  # T0, T0 + 1 at 1-2
    found = await stub.FetchByTimestamp(pb.FetchByTimestampRequest(
        topic="txn-time", timestamp=T0 + 1, isolation_level=COMMITTED), timeout=TIMEOUT)
    assert (found.matched_offset, list(found.records), found.next_offset) == (-1, [], 1)
    assert found.last_stable_offset == 1
    uncommitted = await stub.FetchByTimestamp(pb.FetchByTimestampRequest(
        topic="txn-time", timestamp=T0 + 1), timeout=TIMEOUT)
    assert uncommitted.matched_offset == 2
    listed = await stub.ListOffsets(pb.ListOffsetsRequest(
        topic="txn-time", timestamp=T0 + 1, isolation_level=COMMITTED), timeout=TIMEOUT)
    assert listed.offset == -1
    await producer.end(commit=True)
    found = await stub.FetchByTimestamp(pb.FetchByTimestampRequest(
        topic="txn-time", timestamp=T0 + 1, isolation_level=COMMITTED), timeout=TIMEOUT)
    assert (found.matched_offset, [r.value for r in found.records]) == (2, [b"open-2"])


# ------------------------------------------------------------------------ waiting for commits


async def test_a_read_committed_long_poll_and_subscribe_get_the_records_when_the_commit_lands(
    server, stub,
) -> None:
    await create(stub, "txn-follow")
    producer = await Producer(stub, "follower").init()
    await producer.add(("txn-follow", 0))
    await producer.send("txn-follow", [b"one", b"two"])
    stream = stub.Subscribe(pb.SubscribeRequest(topic="txn-follow", offset=0,
                                                isolation_level=COMMITTED), timeout=60)
    uncommitted_stream = stub.Subscribe(pb.SubscribeRequest(topic="txn-follow", offset=0),
                                        timeout=60)
    # READ_UNCOMMITTED streams the open transaction's records at once.
    assert [r.value for r in (await uncommitted_stream.read()).records] == [b"one", b"two"]
    # Both streams in the server before one ends: then one stream left is the READ_COMMITTED one.
    await until(lambda: server.waiting_rpcs("subscribe") == 2, "both streams started")
    uncommitted_stream.cancel()
    poll = asyncio.ensure_future(stub.FetchByOffset(pb.FetchByOffsetRequest(
        topic="txn-follow", offset=0, max_wait_ms=20_000, isolation_level=COMMITTED),
        timeout=60))
    first = asyncio.ensure_future(stream.read())
    await until(lambda: server.waiting_rpcs("long_poll") == 1
                and server.waiting_rpcs("subscribe") == 1, "the poll and the stream waiting")
    assert not poll.done(), "a READ_COMMITTED long poll answered with nothing stable"
    assert not first.done(), "a READ_COMMITTED stream sent something before the commit"
    await producer.end(commit=True)
    response = await poll
    assert [r.value for r in response.records] == [b"one", b"two"]
    assert response.last_stable_offset == 3
    message = await first
    assert [r.value for r in message.records] == [b"one", b"two"]
    # The stream goes on following: an aborted transaction never shows, a commit does.
    await producer.add(("txn-follow", 0))
    await producer.send("txn-follow", [b"aborted"])
    await producer.end(commit=False)
    await producer.add(("txn-follow", 0))
    await producer.send("txn-follow", [b"three"])
    await producer.end(commit=True)
    message = await stream.read()
    assert [r.value for r in message.records] == [b"three"]
    stream.cancel()


# ------------------------------------------------------------------------ timeouts


async def test_a_transaction_left_open_past_its_timeout_is_aborted_by_the_server(stub) -> None:
    await create(stub, "txn-timeout")
    producer = await Producer(stub, "forgetful").init(timeout_ms=300)
    await producer.add(("txn-timeout", 0))
    await producer.send("txn-timeout", [b"never committed"])
    await produce(stub, "txn-timeout", batch([b"plain"]))
    assert await latest(stub, "txn-timeout", COMMITTED) == 0

    async def aborted() -> bool:
        return (await producer.describe()).state == "CompleteAbort"

    await eventually(aborted, "the server aborting the timed-out transaction")
    assert await latest(stub, "txn-timeout", COMMITTED) == await latest(stub, "txn-timeout") == 3
    committed = await fetch(stub, "txn-timeout", isolation=COMMITTED)
    assert [r.value for r in committed.records] == [b"plain"]
    described = await producer.describe()
    assert described.producer_epoch == producer.epoch + 1  # the abort fenced the producer
    error = await error_of(producer.end(commit=True))
    assert error.reason == "PRODUCER_FENCED"


# ------------------------------------------------------------------------ describe


async def test_describe_transaction_shows_the_states(stub) -> None:
    await create(stub, "described", partitions=2)
    producer = await Producer(stub, "shown").init(timeout_ms=45_000)
    empty = await producer.describe()
    assert (empty.transactional_id, empty.producer_id, empty.producer_epoch, empty.state) == (
        "shown", producer.producer_id, producer.epoch, "Empty")
    assert (empty.transaction_timeout_ms, empty.transaction_start_time_ms) == (45_000, -1)
    assert list(empty.partitions) == []
    await producer.add(("described", 1), ("described", 0))
    ongoing = await producer.describe()
    assert ongoing.state == "Ongoing"
    assert [(p.topic, p.partition) for p in ongoing.partitions] == [
        ("described", 0), ("described", 1)]
    assert 0 < ongoing.transaction_start_time_ms <= ongoing.last_update_time_ms
    await producer.end(commit=True)
    done = await producer.describe()
    assert (done.state, list(done.partitions), done.transaction_start_time_ms) == (
        "CompleteCommit", [], -1)
    error = await error_of(stub.DescribeTransaction(
        pb.DescribeTransactionRequest(transactional_id="never-seen"), timeout=TIMEOUT))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "TRANSACTIONAL_ID_NOT_FOUND")


# ------------------------------------------------------------------------ bad requests


async def test_request_shape_errors_name_the_field(stub) -> None:
    await create(stub, "shapes")
    producer = await Producer(stub, "shapes-t").init()
    tp = [pb.TopicPartition(topic="shapes", partition=0)]
    cases = [
        (stub.InitProducerId(pb.InitProducerIdRequest(transactional_id="")), "transactional_id"),
        (stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
            transactional_id="", producer_id=producer.producer_id, partitions=tp)),
         "transactional_id"),
        (stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
            transactional_id="shapes-t", producer_id=-1, partitions=tp)), "producer_id"),
        (stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
            transactional_id="shapes-t", producer_id=producer.producer_id,
            producer_epoch=40_000, partitions=tp)), "producer_epoch"),
        (stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(**producer.ids)), "partitions"),
        (stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
            **producer.ids, partitions=[pb.TopicPartition(topic="bad/name")])),
         "partitions[0].topic"),
        (stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
            **producer.ids, partitions=[*tp, pb.TopicPartition(topic="shapes", partition=-1)])),
         "partitions[1].partition"),
        (stub.EndTxn(pb.EndTxnRequest(transactional_id="shapes-t", producer_id=-5)),
         "producer_id"),
        (stub.DescribeTransaction(pb.DescribeTransactionRequest()), "transactional_id"),
        (stub.Produce(pb.ProduceRequest(topic="shapes", record_batches=batch([b"v"]),
                                        producer_id=1)), "producer_id"),
        (stub.Produce(pb.ProduceRequest(topic="shapes", records=[pb.Record(value=b"v")],
                                        producer_id=1, producer_epoch=-1)), "producer_epoch"),
        (stub.Produce(pb.ProduceRequest(topic="shapes", records=[pb.Record(value=b"v")],
                                        producer_id=1, base_sequence=-2)), "base_sequence"),
        (stub.Produce(pb.ProduceRequest(topic="shapes", records=[pb.Record(value=b"v")],
                                        transactional=True)), "transactional"),
        (stub.FetchByOffset(pb.FetchByOffsetRequest(topic="shapes", isolation_level=7)),
         "isolation_level"),
    ]
    for call, field_name in cases:
        error = await error_of(call)
        assert error.code is grpc.StatusCode.INVALID_ARGUMENT, (field_name, error)
        assert error.metadata.get("field") == field_name, (field_name, error)
        assert error.message.startswith(f"{field_name}: "), (field_name, error.message)
    assert await latest(stub, "shapes") == 0


async def test_transaction_requests_the_coordinator_refuses(stub) -> None:
    await create(stub, "refused")
    producer = await Producer(stub, "refused-t").init()
    error = await error_of(stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
        **producer.ids, partitions=[pb.TopicPartition(topic="no-such-topic", partition=0)])))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND,
                                          "UNKNOWN_TOPIC_OR_PARTITION")
    error = await error_of(producer.end(commit=True))
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION,
                                          "INVALID_TXN_STATE")
    error = await error_of(stub.InitProducerId(pb.InitProducerIdRequest(
        transactional_id="refused-t", transaction_timeout_ms=3_600_000)))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT,
                                          "INVALID_TRANSACTION_TIMEOUT")
    error = await error_of(stub.EndTxn(pb.EndTxnRequest(
        transactional_id="unknown-t", producer_id=1, producer_epoch=0, commit=True)))
    assert error.reason == "TRANSACTIONAL_ID_NOT_FOUND"
    other = await Producer(stub, "refused-other").init()
    error = await error_of(stub.EndTxn(pb.EndTxnRequest(
        transactional_id="refused-t", producer_id=other.producer_id,
        producer_epoch=producer.epoch, commit=True)))
    assert error.reason == "INVALID_PRODUCER_ID_MAPPING"


# ------------------------------------------------------------------------ restarts and crashes


async def test_the_coordinators_state_survives_a_restart(start_server, tmp_path: Path) -> None:
    data_dir = tmp_path / "restart"
    first = start_server(data_dir)
    async with grpc.aio.insecure_channel(first.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await create(stub, "survives")
        producer = await Producer(stub, "durable").init()
        await producer.add(("survives", 0))
        await producer.send("survives", [b"committed before the restart"])
        await producer.end(commit=True)
        idempotent = await stub.InitProducerId(pb.InitProducerIdRequest(), timeout=TIMEOUT)
    assert first.stop(signal.SIGTERM) == 0
    second = start_server(data_dir)
    async with grpc.aio.insecure_channel(second.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        described = await stub.DescribeTransaction(
            pb.DescribeTransactionRequest(transactional_id="durable"), timeout=TIMEOUT)
        assert (described.producer_id, described.producer_epoch, described.state) == (
            producer.producer_id, producer.epoch, "CompleteCommit")
        again = await Producer(stub, "durable").init()
        assert (again.producer_id, again.epoch) == (producer.producer_id, producer.epoch + 1)
        fresh = await stub.InitProducerId(pb.InitProducerIdRequest(), timeout=TIMEOUT)
        assert fresh.producer_id not in (idempotent.producer_id, producer.producer_id)
        response = await fetch(stub, "survives", isolation=COMMITTED)
        assert [r.value for r in response.records] == [b"committed before the restart"]
    assert second.stop(signal.SIGTERM) == 0


async def test_kill_9_in_a_transaction_then_restart_aborts_it_after_its_timeout(
    start_server, tmp_path: Path,
) -> None:
    data_dir = tmp_path / "crash"
    first = start_server(data_dir, env=QUICK_ABORTS_ENV)
    async with grpc.aio.insecure_channel(first.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await create(stub, "crashed", partitions=2)
        producer = await Producer(stub, "crash-t").init(timeout_ms=1_000)
        await producer.add(("crashed", 0), ("crashed", 1))
        await producer.send("crashed", [b"lost-0"], partition=0)
        await producer.send("crashed", [b"lost-1a", b"lost-1b"], partition=1)
        await produce(stub, "crashed", batch([b"plain"]), partition=1)
    first.kill()
    second = start_server(data_dir, env=QUICK_ABORTS_ENV)
    async with grpc.aio.insecure_channel(second.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)

        async def both_stable() -> bool:
            ends = []
            for partition in (0, 1):
                for isolation in (pb.READ_UNCOMMITTED, COMMITTED):
                    response = await stub.ListOffsets(pb.ListOffsetsRequest(
                        topic="crashed", partition=partition, timestamp=-1,
                        isolation_level=isolation), timeout=TIMEOUT)
                    ends.append(response.offset)
            return ends[0] == ends[1] and ends[2] == ends[3]

        await eventually(both_stable, "the LSO reaching the log end after the restart")

        async def described_now() -> pb.DescribeTransactionResponse:
            return await stub.DescribeTransaction(
                pb.DescribeTransactionRequest(transactional_id="crash-t"), timeout=TIMEOUT)

        # The markers (which move the LSO) are written before the state becomes CompleteAbort,
        # as Kafka's coordinator does: on a loaded machine the LSO can be seen first.
        async def completed() -> bool:
            return (await described_now()).state == "CompleteAbort"

        await eventually(completed, "the transaction's state reaching CompleteAbort")
        described = await described_now()
        assert described.producer_epoch == producer.epoch + 1
        for partition, expected in ((0, []), (1, [b"plain"])):
            response = await fetch(stub, "crashed", partition=partition, isolation=COMMITTED)
            assert [r.value for r in response.records] == expected
            raw = await fetch(stub, "crashed", partition=partition, fmt=RECORD_BATCHES)
            assert [kind for _, kind in control_types(raw.record_batches)] == [
                ControlRecordType.ABORT]
    assert second.stop(signal.SIGTERM) == 0
