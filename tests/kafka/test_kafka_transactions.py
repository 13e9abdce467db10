"""Idempotent and transactional producers over the Kafka protocol, with real clients against a
real server (issue 28; server/kafka/apis/transactions.py): confluent-kafka (librdkafka),
kafka-python and aiokafka producers, read_committed and read_uncommitted consumers, the LSO, offsets sent
with a transaction, fencing, the gRPC client's transactions read by librdkafka, and a kill -9
under an idempotent producer."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from stratalog.client import Client, SyncClient
from stratalog.client import Producer as GrpcProducer
from stratalog.records import iter_batches
from tests.integration.conftest import free_port, wait_until

#: Every client call's bound, in seconds: a hang becomes a failure, never a wait.
CALL_TIMEOUT_S = 30


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _create(server, topic: str, partitions: int) -> None:
    with SyncClient(server.target) as client:
        client.create_topic(topic, partitions)


def _read(bootstrap: str, topic: str, partitions: int, isolation: str,
          ) -> dict[int, list[tuple[bytes | None, bytes]]]:
    """Every record librdkafka reads from ``topic`` at ``isolation``, by partition, until it
    reports the end of each partition (for read_committed: its LSO)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    deadline = time.monotonic() + CALL_TIMEOUT_S
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"partitions {sorted(ended)} ended, not all"
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                ended.add(message.partition())
                continue
            records[message.partition()].append((message.key(), message.value()))
    finally:
        consumer.close()
    return records


def _values(records: dict[int, list[tuple[bytes | None, bytes]]]) -> dict[int, list[bytes]]:
    return {p: [value for _, value in items] for p, items in records.items()}


def _batches(server, topic: str, partition: int) -> list:
    """The batch headers stored in the partition's segments, read from the server's files."""
    directory = Path(server.data_dir) / f"{topic}-{partition}"
    headers = []
    for segment in sorted(directory.glob("*.log")):
        for header, _ in iter_batches(segment.read_bytes(), allow_partial_tail=True):
            headers.append(header)
    return headers


def _transactional(bootstrap: str, transactional_id: str, **extra: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5, **extra})
    producer.init_transactions(CALL_TIMEOUT_S)
    return producer


def _send(producer: Producer, topic: str, partitions: int, prefix: str, count: int) -> None:
    for i in range(count):
        producer.produce(topic, key=f"{prefix}-k{i}".encode(), value=f"{prefix}-{i}".encode(),
                         partition=i % partitions)


def _expected(prefixes: Iterable[str], partitions: int, count: int) -> dict[int, list[bytes]]:
    expected: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for prefix in prefixes:
        for i in range(count):
            expected[i % partitions].append(f"{prefix}-{i}".encode())
    return expected


# ------------------------------------------------------------------------ idempotence


def test_librdkafka_idempotent_producer_stores_every_record_once_in_order(server):
    topic, partitions, count = _topic(), 4, 2000
    _create(server, topic, partitions)
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap,
                         "enable.idempotence": True, "linger.ms": 5,
                         "max.in.flight.requests.per.connection": 5,
                         "batch.num.messages": 50})
    acknowledged = []

    def delivered(error, message) -> None:
        assert error is None, error
        acknowledged.append((message.partition(), message.offset()))

    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions,
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(CALL_TIMEOUT_S) == 0
    assert len(acknowledged) == count
    got = _values(_read(server.kafka_bootstrap, topic, partitions, "read_uncommitted"))
    assert got == {p: [f"v{i}".encode() for i in range(p, count, partitions)]
                   for p in range(partitions)}
    # Stored with a producer id and gapless sequences: the producer was idempotent.
    for partition in range(partitions):
        headers = _batches(server, topic, partition)
        assert {h.producer_id for h in headers} == {headers[0].producer_id} != {-1}
        sequences = [(h.base_sequence, h.records_count) for h in headers]
        assert [s for s, _ in sequences] == [
            sum(c for _, c in sequences[:i]) for i in range(len(sequences))]


def test_kafka_python_idempotent_producer_by_default(server):
    topic, partitions, count = _topic(), 3, 300
    _create(server, topic, partitions)
    producer = KafkaProducer(bootstrap_servers=server.kafka_bootstrap, linger_ms=5)
    futures = [producer.send(topic, value=f"p{i}".encode(), partition=i % partitions)
               for i in range(count)]
    offsets = [f.get(timeout=CALL_TIMEOUT_S).offset for f in futures]
    producer.close(timeout=CALL_TIMEOUT_S)
    assert offsets == [i // partitions for i in range(count)]
    got = _values(_read(server.kafka_bootstrap, topic, partitions, "read_uncommitted"))
    assert got == {p: [f"p{i}".encode() for i in range(p, count, partitions)]
                   for p in range(partitions)}
    for partition in range(partitions):
        assert all(h.producer_id >= 0 and h.base_sequence >= 0
                   for h in _batches(server, topic, partition))


# ------------------------------------------------------------------------ transactions


def test_librdkafka_commits_and_aborts_and_read_committed_sees_only_the_commits(server):
    topic, partitions, count = _topic(), 3, 30
    _create(server, topic, partitions)
    producer = _transactional(server.kafka_bootstrap, f"tx-{topic}")
    for prefix, commit in (("c1", True), ("a1", False), ("c2", True), ("a2", False)):
        producer.begin_transaction()
        _send(producer, topic, partitions, prefix, count)
        if commit:
            producer.commit_transaction(CALL_TIMEOUT_S)
        else:
            producer.flush(CALL_TIMEOUT_S)  # the records are stored, then aborted
            producer.abort_transaction(CALL_TIMEOUT_S)
    bootstrap = server.kafka_bootstrap
    committed = _values(_read(bootstrap, topic, partitions, "read_committed"))
    assert committed == _expected(["c1", "c2"], partitions, count)
    everything = _values(_read(bootstrap, topic, partitions, "read_uncommitted"))
    assert everything == _expected(["c1", "a1", "c2", "a2"], partitions, count)

    # kafka-python's read_committed consumer filters the aborted ones the same way.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             group_id=None)
    assigned = [KafkaTopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    ends = consumer.end_offsets(assigned)
    seen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + CALL_TIMEOUT_S
    try:
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            assert time.monotonic() < deadline, {tp: consumer.position(tp) for tp in assigned}
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                seen[tp.partition].extend(m.value for m in messages)
    finally:
        consumer.close()
    assert seen == committed


def test_the_last_stable_offset_stops_at_an_open_transaction(server):
    topic = _topic()
    _create(server, topic, 1)
    plain = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for i in range(5):
        plain.produce(topic, value=f"before{i}".encode(), partition=0)
    assert plain.flush(CALL_TIMEOUT_S) == 0
    producer = _transactional(server.kafka_bootstrap, f"tx-{topic}")
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"open{i}".encode(), partition=0)
    assert producer.flush(CALL_TIMEOUT_S) == 0
    partition = KafkaTopicPartition(topic, 0)

    def end_offset(isolation: str) -> int:
        consumer = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap,
                                 isolation_level=isolation, group_id=None)
        try:
            return consumer.end_offsets([partition])[partition]
        finally:
            consumer.close()

    # ListOffsets(latest): the high watermark, or at read_committed the open transaction's
    # first offset.
    assert (end_offset("read_uncommitted"), end_offset("read_committed")) == (8, 5)
    assert _values(_read(server.kafka_bootstrap, topic, 1, "read_committed")) == {
        0: [f"before{i}".encode() for i in range(5)]}
    producer.commit_transaction(CALL_TIMEOUT_S)
    # The COMMIT marker takes offset 8: both ends are past it.
    assert (end_offset("read_uncommitted"), end_offset("read_committed")) == (9, 9)


def test_offsets_sent_with_a_transaction_are_committed_with_it_only(server):
    source, sink, group = _topic(), _topic(), f"g-{uuid.uuid4().hex[:8]}"
    _create(server, source, 2)
    _create(server, sink, 1)
    feeder = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for i in range(60):
        feeder.produce(source, value=f"in{i}".encode(), partition=i % 2)
    assert feeder.flush(CALL_TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    producer = _transactional(server.kafka_bootstrap, f"tx-{sink}")

    def committed_offsets() -> dict[tuple[str, int], int]:
        async def fetch() -> dict[tuple[str, int], int]:
            async with Client(server.target) as client:
                found = await client.offset_fetch(group, [(source, 0), (source, 1)])
            return {(tp.topic, tp.partition): o.offset for tp, o in found.items()}
        return asyncio.run(fetch())

    try:
        producer.begin_transaction()
        producer.produce(sink, value=b"out-1", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 20), TopicPartition(source, 1, 7)],
            consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
        assert committed_offsets() == {}  # pending until the transaction commits
        producer.commit_transaction(CALL_TIMEOUT_S)
        assert committed_offsets() == {(source, 0): 20, (source, 1): 7}

        producer.begin_transaction()
        producer.produce(sink, value=b"out-2", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 30)], consumer.consumer_group_metadata(),
            CALL_TIMEOUT_S)
        producer.abort_transaction(CALL_TIMEOUT_S)
        assert committed_offsets() == {(source, 0): 20, (source, 1): 7}
    finally:
        consumer.close()
    assert _values(_read(server.kafka_bootstrap, sink, 1, "read_committed")) == {0: [b"out-1"]}


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(server):
    topic = _topic()
    _create(server, topic, 2)
    transactional_id = f"tx-{topic}"
    first = _transactional(server.kafka_bootstrap, transactional_id)
    first.begin_transaction()
    _send(first, topic, 2, "zombie", 10)
    assert first.flush(CALL_TIMEOUT_S) == 0
    second = _transactional(server.kafka_bootstrap, transactional_id)  # aborts the first's
    second.begin_transaction()
    _send(second, topic, 2, "live", 10)
    second.commit_transaction(CALL_TIMEOUT_S)
    with pytest.raises(KafkaException) as caught:
        first.commit_transaction(CALL_TIMEOUT_S)
    error = caught.value.args[0]
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                            KafkaError.INVALID_PRODUCER_EPOCH), error
    assert error.fatal(), error
    assert _values(_read(server.kafka_bootstrap, topic, 2, "read_committed")) == _expected(
        ["live"], 2, 10)


def test_aiokafka_transactions_and_read_committed(server):
    topic = _topic()
    _create(server, topic, 1)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=server.kafka_bootstrap,
                                    transactional_id=f"tx-{topic}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send(topic, f"c{i}".encode(), partition=0)
            await producer.begin_transaction()
            for i in range(5):
                await producer.send(topic, f"a{i}".encode(), partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic, b"c5", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=server.kafka_bootstrap,
                                    isolation_level="read_committed",
                                    auto_offset_reset="earliest")
        await consumer.start()
        partition = AioTopicPartition(topic, 0)
        consumer.assign([partition])
        seen: list[bytes] = []
        try:
            end = (await consumer.end_offsets([partition]))[partition]
            assert end == 14  # 11 records, 3 markers
            deadline = time.monotonic() + CALL_TIMEOUT_S
            while await consumer.position(partition) < end:
                assert time.monotonic() < deadline, seen
                for messages in (await consumer.getmany(timeout_ms=1000)).values():
                    seen.extend(m.value for m in messages)
        finally:
            await consumer.stop()
        return seen

    assert asyncio.run(run()) == [f"c{i}".encode() for i in range(6)]


# ------------------------------------------------------------------------ interchange


def test_grpc_client_transactions_read_by_librdkafka_read_committed(server):
    topic = _topic()
    _create(server, topic, 2)
    headers = (("trace", b"abc"), ("n", b""))

    async def produce() -> None:
        async with GrpcProducer(server.target, transactional_id=f"tx-{topic}") as producer:
            for prefix, commit in (("kept", True), ("dropped", False), ("kept2", True)):
                await producer.begin_transaction()
                for i in range(10):
                    await producer.send(topic, f"{prefix}-{i}".encode(),
                                        key=f"{prefix}-k{i}".encode(), partition=i % 2,
                                        timestamp_ms=1_700_000_000_000 + i, headers=headers)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.flush()
                    await producer.abort_transaction()

    asyncio.run(produce())
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "r-" + topic,
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    seen = []
    ended: set[int] = set()
    deadline = time.monotonic() + CALL_TIMEOUT_S
    try:
        while len(ended) < 2:
            assert time.monotonic() < deadline, seen
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                ended.add(message.partition())
                continue
            seen.append((message.partition(), message.key(), message.value(),
                         message.timestamp()[1], message.headers()))
    finally:
        consumer.close()
    expected = [(i % 2, f"{prefix}-k{i}".encode(), f"{prefix}-{i}".encode(),
                 1_700_000_000_000 + i, list(headers))
                for prefix in ("kept", "kept2") for i in range(10)]
    assert sorted(seen) == sorted(expected)


# ------------------------------------------------------------------------ crash


@pytest.mark.serial
def test_kill_9_under_an_idempotent_producer_keeps_every_acknowledged_record_once(
    start_server, tmp_path,
):
    grpc_port, kafka_port = free_port(), free_port()
    ports = ("--listen", f"127.0.0.1:{grpc_port}", "--kafka-listen", f"127.0.0.1:{kafka_port}")
    data_dir = tmp_path / "data"
    server = start_server(data_dir, *ports)
    topic, partitions = _topic(), 3
    _create(server, topic, partitions)
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap,
                         "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                         "batch.num.messages": 100, "message.timeout.ms": 120_000,
                         "queue.buffering.max.messages": 5000,
                         "reconnect.backoff.max.ms": 200})
    acknowledged: list[tuple[int, bytes]] = []
    failed: list[object] = []
    lock = threading.Lock()
    restarted = threading.Event()
    produced = 0
    # At least this many records, and the producer keeps sending until the server is back, so
    # that batches are in flight when it is killed and queued while it is down.
    count_min, count_max = 3000, 500_000

    def delivered(error, message) -> None:
        with lock:
            if error is None:
                acknowledged.append((message.partition(), message.value()))
            else:
                failed.append(error)

    def produce() -> None:
        nonlocal produced
        while produced < count_max and (produced < count_min or not restarted.is_set()):
            try:
                producer.produce(topic, value=f"{produced:08d}".encode(),
                                 partition=produced % partitions, on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)  # the local queue is full: serve the callbacks first
                continue
            produced += 1
            producer.poll(0)
        producer.flush(120)

    sender = threading.Thread(target=produce, name="idempotent-producer")
    sender.start()
    try:
        wait_until(lambda: len(acknowledged) >= count_min // 3,
                   "a thousand records acknowledged", timeout_s=60)
        server.kill()
        server = start_server(data_dir, *ports)
    finally:
        restarted.set()
        sender.join(180)
    assert not sender.is_alive(), "the producer did not finish"
    assert failed == [] and len(acknowledged) == produced
    stored = _values(_read(server.kafka_bootstrap, topic, partitions, "read_uncommitted"))
    for partition in range(partitions):
        values = stored[partition]
        assert len(values) == len(set(values)), f"partition {partition}: a record twice"
        assert values == sorted(values), f"partition {partition}: out of order"
        assert values == [f"{i:08d}".encode() for i in range(partition, produced, partitions)]
