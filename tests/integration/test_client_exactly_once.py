"""The idempotent and transactional Producer and READ_COMMITTED Consumer against the real server.

Each test uses topics of its own on the module's server, or servers of its own where it stops
them (restarts on the same port, so that the Producer's target stays valid). No assertion
depends on timing: waits are bounded by generous deadlines that only turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stratalog.client import (
    Client,
    Consumer,
    FetchFormat,
    IsolationLevel,
    Producer,
    SyncClient,
    errors,
)
from stratalog.client.transaction_manager import TransactionState
from stratalog.client.wire import LATEST
from stratalog.records import iter_batches

from .conftest import free_port

DEADLINE_S = 60
COMMITTED = IsolationLevel.READ_COMMITTED
UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
FENCED = (errors.ProducerFencedError, errors.InvalidProducerEpochError)


@pytest.fixture
async def client(server_target: str) -> AsyncIterator[Client]:
    async with Client(server_target, timeout_s=30) as client:
        yield client


async def read_all(
    client: Client | str, topic: str, level: IsolationLevel
) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record each partition shows at ``level``, to its end."""

    async def read() -> dict[int, list[tuple[int, bytes]]]:
        found: dict[int, list[tuple[int, bytes]]] = {}
        async with Consumer(client, topic, isolation_level=level) as consumer:
            for partition in consumer.partitions:
                found[partition] = []
            async for record in consumer:
                assert record.value is not None
                found[record.partition].append((record.offset, record.value))
        return found

    return await asyncio.wait_for(read(), DEADLINE_S)


def values(found: dict[int, list[tuple[int, bytes]]], partition: int = 0) -> list[bytes]:
    return [value for _, value in found[partition]]


async def until(condition, what: str) -> None:
    """Poll ``condition()`` until it holds (a deadline that turns a hang into a failure)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        assert loop.time() < deadline, f"{what}: not within {DEADLINE_S} s"
        await asyncio.sleep(0.01)


async def stored_producer_stamps(client: Client, topic: str) -> list[tuple[int, int, int]]:
    """(producer_id, base_sequence, records) of each data batch of partition 0, as stored."""
    result = await client.fetch_by_offset(
        topic, 0, 0, max_bytes=64 * 1024 * 1024, fetch_format=FetchFormat.RECORD_BATCHES
    )
    return [
        (header.producer_id, header.base_sequence, header.records_count)
        for header, _ in iter_batches(result.record_batches)
        if not header.is_control
    ]


# --- the idempotent producer ---------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_idempotent_records_are_stored_once_in_order_through_server_restarts(
    start_server, tmp_path: Path, caplog: pytest.LogCaptureFixture, signum: int
) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    listen = ("--listen", f"127.0.0.1:{port}")
    server = start_server(data_dir, *listen)
    topic = "eo-restarts"
    async with Client(server.target) as admin:
        await admin.create_topic(topic, 2, {"segment.bytes": "16384"})
    caplog.set_level(logging.INFO, logger="stratalog.client.producer")
    loop = asyncio.get_running_loop()
    producer = Producer(server.target, linger_ms=1, batch_bytes_max=1024, request_timeout_s=5,
                        retry_backoff_ms=20, retry_backoff_max_ms=200)
    futures: list[tuple[int, int, object]] = []
    stop = asyncio.Event()

    async def send_numbers() -> None:
        number = 0
        while not stop.is_set():
            partition = number % 2
            future = await producer.send(topic, b"%d" % number, partition=partition)
            futures.append((partition, number, future))
            number += 1
            if number % 40 == 0:
                await asyncio.sleep(0.002)  # let responses in: batches in flight at each stop

    def acknowledged() -> int:
        return sum(1 for _, _, future in futures if future.done())  # type: ignore[attr-defined]

    sender = asyncio.create_task(send_numbers())
    try:
        for restart in range(2):
            await until(lambda goal=(restart + 1) * 2000: acknowledged() >= goal,
                        "records acknowledged")
            await loop.run_in_executor(None, server.stop, signum)
            server = await loop.run_in_executor(None, lambda: start_server(data_dir, *listen))
        sent_by_now = len(futures)
        await until(lambda: acknowledged() >= sent_by_now + 500, "records after the restarts")
    finally:
        stop.set()
        await sender
    await asyncio.wait_for(producer.flush(), DEADLINE_S)
    await producer.close()

    acked: dict[int, dict[int, int]] = {0: {}, 1: {}}
    for partition, number, future in futures:
        acked[partition][number] = future.result().offset  # type: ignore[attr-defined]
    stored = await read_all(server.target, topic, UNCOMMITTED)
    for partition in (0, 1):
        numbers = [int(value) for value in values(stored, partition)]
        sent = [number for p, number, _ in futures if p == partition]
        assert numbers == sent, f"partition {partition}: stored != sent (duplicates or order)"
        assert {int(v): offset for offset, v in stored[partition]} == acked[partition]
    retried = [r.message for r in caplog.records if r.message.startswith("retrying")]
    assert retried, "no batch was resent: the stops did not interrupt any request"


async def test_five_in_flight_keep_the_send_order(client: Client) -> None:
    topic = "eo-in-flight"
    await client.create_topic(topic, 1)
    async with Producer(client, max_in_flight_per_partition=5, batch_bytes_max=600,
                        linger_ms=0) as producer:
        futures = [await producer.send(topic, b"%05d" % i + bytes(90)) for i in range(3000)]
        await producer.flush()
    assert [(await future).offset for future in futures] == list(range(3000))
    stored = values(await read_all(client, topic, UNCOMMITTED))
    assert [value[:5] for value in stored] == [b"%05d" % i for i in range(3000)]
    stamps = await stored_producer_stamps(client, topic)
    assert len(stamps) > 100 and len({producer_id for producer_id, _, _ in stamps}) == 1


async def test_a_refused_batch_leaves_no_gap_the_next_ones_go_on_under_a_new_id(
    client: Client,
) -> None:
    topic = "eo-refused"
    await client.create_topic(topic, 1, {"max.message.bytes": "2000"})
    async with Producer(client, batch_bytes_max=1500, linger_ms=1000) as producer:
        before = [await producer.send(topic, b"a%02d" % i + bytes(100)) for i in range(30)]
        too_large = await producer.send(topic, bytes(5000))  # a batch of its own
        after = [await producer.send(topic, b"b%02d" % i + bytes(100)) for i in range(30)]
        await producer.flush()
    with pytest.raises(errors.RecordTooLargeError):
        await too_large
    assert [(await f).offset for f in before + after] == list(range(60))
    stored = values(await read_all(client, topic, UNCOMMITTED))
    assert [v[:3] for v in stored] == [b"a%02d" % i for i in range(30)] + [
        b"b%02d" % i for i in range(30)]
    # The batches after the refused one were restamped: a second producer id, from sequence 0.
    stamps = await stored_producer_stamps(client, topic)
    producer_ids = list(dict.fromkeys(producer_id for producer_id, _, _ in stamps))
    assert len(producer_ids) == 2
    for producer_id in producer_ids:
        sequence = 0
        for pid, base_sequence, count in stamps:
            if pid == producer_id:
                assert base_sequence == sequence
                sequence += count


async def test_delivery_timeout_decides_when_the_server_is_down(start_server, tmp_path) -> None:
    server = start_server(tmp_path / "data")
    topic = "eo-down"
    async with Client(server.target) as client:
        await client.create_topic(topic, 1)
        options = {"delivery_timeout_ms": 1500, "retry_backoff_ms": 10,
                   "retry_backoff_max_ms": 50, "request_timeout_s": 1}
        producer = Producer(client, **options)
        assert (await (await producer.send(topic, b"first"))).offset == 0
        never_initialised = Producer(client, **options)
        await never_initialised.partitions_for(topic)
        server.stop()
        future = await producer.send(topic, b"second")
        with pytest.raises(errors.DeliveryTimeoutError) as caught:
            await future
        # Retried until the delivery timeout, not a fixed count (the old default was 5).
        assert caught.value.attempts > 5
        assert isinstance(caught.value.last_error, errors.BrokerUnavailableError)
        future = await never_initialised.send(topic, b"never")
        with pytest.raises(errors.DeliveryTimeoutError, match="no producer id yet"):
            await future
        await producer.close()
        await never_initialised.close()


# --- transactions --------------------------------------------------------------------------------


async def test_commits_and_aborts_as_each_isolation_level_sees_them(client: Client) -> None:
    topic = "eo-txn"
    await client.create_topic(topic, 2)
    async with Producer(client, transactional_id="eo-txn-app", linger_ms=1) as producer:
        await producer.begin_transaction()
        first = [await producer.send(topic, b"c1-%d" % i, partition=i % 2) for i in range(10)]
        await producer.commit_transaction()
        assert producer.transaction_state is TransactionState.READY
        await producer.begin_transaction()
        aborted = [await producer.send(topic, b"ab-%d" % i, partition=i % 2) for i in range(6)]
        await producer.flush()  # stored, then aborted
        await producer.abort_transaction()
        async with producer.transaction():
            second = [await producer.send(topic, b"c2-%d" % i, partition=i % 2)
                      for i in range(8)]
        identity = producer.producer_id_and_epoch
    for future in first + aborted + second:
        await future  # every batch was acknowledged, the aborted ones too
    committed = await read_all(client, topic, COMMITTED)
    everything = await read_all(client, topic, UNCOMMITTED)
    for partition in (0, 1):
        mine = [i for i in range(10) if i % 2 == partition]
        assert values(committed, partition) == [b"c1-%d" % i for i in mine] + [
            b"c2-%d" % i for i in range(8) if i % 2 == partition]
        # READ_UNCOMMITTED shows the aborted records, never the markers (control batches).
        assert values(everything, partition) == (
            [b"c1-%d" % i for i in mine]
            + [b"ab-%d" % i for i in range(6) if i % 2 == partition]
            + [b"c2-%d" % i for i in range(8) if i % 2 == partition])
        committed_end = await client.list_offsets(topic, partition, LATEST,
                                                  isolation_level=COMMITTED)
        assert committed_end == await client.list_offsets(topic, partition, LATEST)
    described = await client.describe_transaction("eo-txn-app")
    assert described.state == "CompleteCommit"
    assert (described.producer_id, described.producer_epoch) == identity


async def test_abort_drops_what_was_not_sent(client: Client) -> None:
    topic = "eo-txn-unsent"
    await client.create_topic(topic, 1)
    async with Producer(client, transactional_id="eo-unsent", linger_ms=60_000) as producer:
        await producer.begin_transaction()
        unsent = [await producer.send(topic, b"never-%d" % i) for i in range(3)]
        await producer.abort_transaction()
        for future in unsent:
            with pytest.raises(errors.TransactionAbortedError):
                await future
        async with producer.transaction():
            kept = await producer.send(topic, b"kept")
    assert (await kept).offset >= 0
    assert values(await read_all(client, topic, UNCOMMITTED)) == [b"kept"]


async def test_read_committed_stops_at_an_open_transaction_until_it_commits(
    client: Client,
) -> None:
    topic = "eo-txn-open"
    await client.create_topic(topic, 1)
    async with (
        Producer(client, transactional_id="eo-open-a", linger_ms=1) as done,
        Producer(client, transactional_id="eo-open-b", linger_ms=1) as pending,
    ):
        async with done.transaction():
            for i in range(3):
                await done.send(topic, b"done-%d" % i)
        await pending.begin_transaction()
        for i in range(2):
            await pending.send(topic, b"open-%d" % i)
        await pending.flush()
        async with done.transaction():
            await done.send(topic, b"after")  # past the open transaction: not stable yet
        # Without follow the committed reader ends at the LSO, not waiting behind the open one.
        assert values(await read_all(client, topic, COMMITTED)) == [
            b"done-0", b"done-1", b"done-2"]
        assert len(values(await read_all(client, topic, UNCOMMITTED))) == 6
        await pending.commit_transaction()
    assert values(await read_all(client, topic, COMMITTED)) == [
        b"done-0", b"done-1", b"done-2", b"open-0", b"open-1", b"after"]


async def test_a_new_instance_fences_the_zombie(client: Client) -> None:
    topic = "eo-fence"
    await client.create_topic(topic, 2)
    zombie = Producer(client, transactional_id="eo-fence-app", linger_ms=1)
    await zombie.begin_transaction()
    await zombie.send(topic, b"zombie", partition=0)
    await zombie.flush()
    successor = Producer(client, transactional_id="eo-fence-app", linger_ms=1)
    await successor.init_transactions()  # bumps the epoch: aborts the zombie's transaction
    assert successor.producer_id_and_epoch.producer_id == zombie.producer_id_and_epoch.producer_id
    assert (successor.producer_id_and_epoch.producer_epoch
            > zombie.producer_id_and_epoch.producer_epoch)
    # The zombie learns it with its next request: a partition it adds, or its commit.
    late = await zombie.send(topic, b"zombie-late", partition=1)
    with pytest.raises(FENCED):
        await late
    assert zombie.transaction_state is TransactionState.FATAL_ERROR
    with pytest.raises(FENCED):
        await zombie.send(topic, b"again", partition=0)
    with pytest.raises(FENCED):
        await zombie.commit_transaction()
    await zombie.close()
    async with successor.transaction():
        await successor.send(topic, b"successor", partition=0)
    await successor.close()
    committed = await read_all(client, topic, COMMITTED)
    assert values(committed, 0) == [b"successor"] and values(committed, 1) == []
    assert values(await read_all(client, topic, UNCOMMITTED), 0) == [b"zombie", b"successor"]


async def test_a_zombie_commit_is_refused(client: Client) -> None:
    topic = "eo-fence-commit"
    await client.create_topic(topic, 1)
    zombie = Producer(client, transactional_id="eo-fence-commit-app", linger_ms=1)
    await zombie.begin_transaction()
    await zombie.send(topic, b"zombie")
    await zombie.flush()
    async with Producer(client, transactional_id="eo-fence-commit-app") as successor:
        await successor.init_transactions()
        with pytest.raises(FENCED):
            await zombie.commit_transaction()
        await zombie.close()
    assert values(await read_all(client, topic, COMMITTED)) == []


async def test_an_exception_in_the_transaction_block_aborts_it(client: Client) -> None:
    topic = "eo-txn-block"
    await client.create_topic(topic, 1)
    async with Producer(client, transactional_id="eo-block", linger_ms=1) as producer:
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                doomed = await producer.send(topic, b"doomed")
                await producer.flush()  # stored; the abort marker hides it
                raise RuntimeError("boom")
        assert producer.transaction_state is TransactionState.READY
        assert (await doomed).offset == 0
        assert (await client.describe_transaction("eo-block")).state == "CompleteAbort"
        async with producer.transaction():
            await producer.send(topic, b"kept")
    assert values(await read_all(client, topic, COMMITTED)) == [b"kept"]
    assert values(await read_all(client, topic, UNCOMMITTED)) == [b"doomed", b"kept"]


async def test_a_failed_batch_makes_the_commit_raise_and_the_block_abort(client: Client) -> None:
    topic = "eo-txn-failed"
    await client.create_topic(topic, 1, {"max.message.bytes": "2000"})
    async with Producer(client, transactional_id="eo-failed", linger_ms=1) as producer:
        with pytest.raises(errors.RecordTooLargeError):
            async with producer.transaction():
                await producer.send(topic, b"small")
                await producer.send(topic, bytes(5000))
        # The abort took a new epoch (the failed batch left a sequence gap): go on as usual.
        assert producer.transaction_state is TransactionState.READY
        async with producer.transaction():
            await producer.send(topic, b"next")
    assert values(await read_all(client, topic, COMMITTED)) == [b"next"]


# --- the RPCs themselves, through the blocking client --------------------------------------------


def test_sync_client_idempotent_and_transactional_rpcs(server_target: str) -> None:
    topic = "eo-sync"
    with SyncClient(server_target) as client:
        client.create_topic(topic, 1)
        idempotent = client.init_producer_id()
        stamp = {"producer_id": idempotent.producer_id,
                 "producer_epoch": idempotent.producer_epoch}
        first = client.produce(topic, 0, [b"a", b"b"], base_sequence=0, **stamp)
        again = client.produce(topic, 0, [b"a", b"b"], base_sequence=0, **stamp)
        assert not first.duplicate and again.duplicate
        assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
        with pytest.raises(errors.OutOfOrderSequenceError):
            client.produce(topic, 0, [b"c"], base_sequence=5, **stamp)

        txn = client.init_producer_id("eo-sync-app", transaction_timeout_ms=30_000)
        client.add_partitions_to_txn("eo-sync-app", txn.producer_id, txn.producer_epoch,
                                     [(topic, 0)])
        client.produce(topic, 0, [b"t"], producer_id=txn.producer_id,
                       producer_epoch=txn.producer_epoch, base_sequence=0, transactional=True)
        described = client.describe_transaction("eo-sync-app")
        assert described.state == "Ongoing" and described.partitions == ((topic, 0),)
        open_fetch = client.fetch_by_offset(topic, 0, 0, isolation_level=COMMITTED)
        assert open_fetch.last_stable_offset == 2 < open_fetch.high_watermark == 3
        assert [r.value for r in open_fetch.records] == [b"a", b"b"]
        client.end_txn("eo-sync-app", txn.producer_id, txn.producer_epoch, True)
        done = client.fetch_by_offset(topic, 0, 0, isolation_level=COMMITTED)
        assert done.last_stable_offset == done.high_watermark == 4  # the marker took offset 3
        assert [r.value for r in done.records] == [b"a", b"b", b"t"]
        assert client.describe_transaction("eo-sync-app").state == "CompleteCommit"
