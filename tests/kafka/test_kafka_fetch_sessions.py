"""Fetch sessions (KIP-227) on the Kafka listener: the Fetch handler over a real serving layer
with kafka-python's protocol classes as encoder and decoder (the oracle), then real clients
against a server process: kafka-python's consumer with sessions, librdkafka without; and
kafka-python's consumer across a leader's kill -9 in a cluster of three."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as RdTopicPartition
from kafka import KafkaConsumer
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.structs import TopicPartition

from stratalog.client import SyncClient
from stratalog.records import build_batch
from stratalog.server.broker import ReplicaManager
from stratalog.server.client_limits import ClientLimits
from stratalog.server.kafka.apis.fetch import fetch
from stratalog.server.kafka.context import ConnectionState, KafkaServices, RequestContext
from stratalog.server.kafka.error_codes import Code
from stratalog.server.kafka.hot_messages import decode_fetch_request, encode_fetch_response
from stratalog.server.metrics import ServerMetrics
from stratalog.server.security.principal import ANONYMOUS, CallIdentity, Principal
from stratalog.server.security.quotas import QuotaConfig, QuotaManager
from stratalog.server.settings import Settings
from stratalog.server.settings_schema import Address
from stratalog.server.storage.log_manager import LogManager
from tests.cluster.conftest import wait_for
from tests.cluster.test_faults import FAILOVER_BOUND_S, create_topic, leader_of, start_cluster

_Topic = FetchRequest.FetchTopic
_Partition = _Topic.FetchPartition
_Forgotten = FetchRequest.ForgottenTopic
PARTITIONS = 20


def _services(tmp_path: Path, **settings: Any) -> tuple[KafkaServices, LogManager,
                                                         ThreadPoolExecutor]:
    log_manager = LogManager.open([tmp_path / "data"])
    executor = ThreadPoolExecutor(2)
    config = Settings(**settings)
    metrics = ServerMetrics()
    replicas = ReplicaManager(log_manager, config, metrics, executor)
    log_manager.create_topic("t", PARTITIONS)
    for partition in range(PARTITIONS):
        log_manager.get_log("t", partition).append(build_batch([(1, None, b"v", ())] * 5))
    services = KafkaServices(
        replicas, log_manager, None, None, config, metrics, executor,  # type: ignore[arg-type]
        ClientLimits(10, 10, 100), QuotaManager(QuotaConfig()), None,
        advertised=lambda: Address("127.0.0.1", 9092), time_ms=lambda: int(time.time() * 1000))
    return services, log_manager, executor


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[KafkaServices]:
    services, log_manager, executor = _services(tmp_path)
    try:
        yield services
    finally:
        services.replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()


def _caller(services: KafkaServices, principal: str = "User:alice",
            ) -> Callable[..., Awaitable[Any]]:
    """``call(session_id, epoch, partitions, forgotten=())``: a Fetch v12 of ``partitions``
    (``{partition: fetch_offset}`` of topic t) as kafka-python encodes it, decoded as the
    listener does, answered by the handler, and decoded back by kafka-python."""
    connection = ConnectionState("127.0.0.1:5555", "127.0.0.1", CallIdentity(
        Principal.parse(principal) if principal != str(ANONYMOUS) else ANONYMOUS,
        "127.0.0.1"))
    version = 12

    async def call(session_id: int, epoch: int, partitions: dict[int, int],
                   forgotten: tuple[int, ...] = ()) -> Any:
        request = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
            session_id=session_id, session_epoch=epoch,
            topics=[_Topic(topic="t", partitions=[
                _Partition(partition=p, current_leader_epoch=-1, fetch_offset=offset,
                           last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=1 << 20)
                for p, offset in partitions.items()])] if partitions else [],
            forgotten_topics_data=[_Forgotten(topic="t", partitions=list(forgotten))]
            if forgotten else [], rack_id="")
        body = request.encode(version=version)
        ctx = RequestContext(services, connection, 1, version, "fetch-session-test")
        response = await fetch(ctx, decode_fetch_request(body, 0, version))
        encoded = b"".join(bytes(piece) for piece in encode_fetch_response(response, version))
        return FetchResponse.decode(encoded, version=version)

    return call


def _answered(response: Any) -> dict[int, int]:
    """partition -> bytes of records, of the partitions an answer names."""
    return {p.partition_index: len(p.records or b"")
            for topic in response.responses for p in topic.partitions}


async def test_a_session_opens_and_answers_only_news(services: KafkaServices) -> None:
    call = _caller(services)
    everything = {p: 0 for p in range(PARTITIONS)}
    full = await call(0, 0, everything)
    assert full.error_code == 0 and full.session_id != 0
    assert all(size > 0 for size in _answered(full).values())
    assert len(_answered(full)) == PARTITIONS
    session_id = full.session_id
    # The client moves every partition to offset 5 (what it read): all are named, none has
    # records or new bounds, so the answer names none.
    moved = await call(session_id, 1, {p: 5 for p in range(PARTITIONS)})
    assert (moved.error_code, moved.session_id, _answered(moved)) == (0, session_id, {})
    # New records on two partitions: only they are answered, to a request naming nothing.
    for partition in (3, 11):
        services.log_manager.get_log("t", partition).append(build_batch([(1, None, b"w", ())]))
    news = await call(session_id, 2, {})
    assert set(_answered(news)) == {3, 11} and all(_answered(news).values())
    assert {p.high_watermark for t in news.responses for p in t.partitions} == {6}
    # Forgetting all but one partition; a wrong epoch; closing.
    kept = await call(session_id, 3, {}, forgotten=tuple(range(1, PARTITIONS)))
    assert kept.error_code == 0
    assert services.metrics.registry.get_sample_value(
        "stratalog_kafka_fetch_session_partitions") == 1
    stale = await call(session_id, 3, {})
    assert (stale.error_code, stale.session_id) == (Code.INVALID_FETCH_SESSION_EPOCH, 0)
    closed = await call(session_id, -1, {0: 0})
    assert (closed.error_code, closed.session_id, len(_answered(closed))) == (0, 0, 1)
    gone = await call(session_id, 5, {})
    assert gone.error_code == Code.FETCH_SESSION_ID_NOT_FOUND
    registry = services.metrics.registry
    counts = {kind: registry.get_sample_value("stratalog_kafka_fetch_requests_total",
                                              {"session": kind})
              for kind in ("full", "incremental", "sessionless", "session_error")}
    assert counts == {"full": 1, "incremental": 3, "sessionless": 1, "session_error": 2}
    assert registry.get_sample_value("stratalog_kafka_fetch_sessions") == 0


async def test_another_principal_is_refused_the_session(services: KafkaServices) -> None:
    alice, mallory = _caller(services, "User:alice"), _caller(services, "User:mallory")
    session_id = (await alice(0, 0, {0: 0})).session_id
    assert session_id != 0
    stolen = await mallory(session_id, 1, {})
    assert (stolen.error_code, _answered(stolen)) == (Code.FETCH_SESSION_ID_NOT_FOUND, {})
    # Her close of it is her own sessionless fetch; Alice's session goes on at epoch 1.
    await mallory(session_id, -1, {1: 0})
    assert (await alice(session_id, 1, {})).error_code == 0


async def test_sessions_off_answers_session_id_zero(tmp_path: Path) -> None:
    services, log_manager, executor = _services(tmp_path, kafka_fetch_session_cache_slots=0)
    try:
        call = _caller(services)
        full = await call(0, 0, {0: 0, 1: 0})
        assert (full.error_code, full.session_id, len(_answered(full))) == (0, 0, 2)
        named = await call(1234, 1, {})
        assert named.error_code == Code.FETCH_SESSION_ID_NOT_FOUND
    finally:
        services.replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()


async def test_the_cache_is_bounded_by_slots_and_by_request_bytes(tmp_path: Path) -> None:
    """One slot: a second consumer gets session id 0 (none evictable yet). Requests of at most
    5 partitions' bytes: a session never caches more than 5 partitions."""
    services, log_manager, executor = _services(
        tmp_path, kafka_fetch_session_cache_slots=1, kafka_request_bytes_max=5 * 24)
    try:
        alice, bob = _caller(services, "User:alice"), _caller(services, "User:bob")
        assert services.fetch_sessions.partitions_max == 5
        session_id = (await alice(0, 0, {p: 0 for p in range(4)})).session_id
        assert session_id != 0
        second = await bob(0, 0, {0: 0})
        assert (second.error_code, second.session_id, len(_answered(second))) == (0, 0, 1)
        grown = await alice(session_id, 1, {4: 0, 5: 0})
        assert grown.error_code == Code.FETCH_SESSION_ID_NOT_FOUND
        assert len(services.fetch_sessions) == 0
    finally:
        services.replicas.begin_shutdown()
        executor.shutdown()
        log_manager.close()


# -- real clients against a server process ------------------------------------------------


def _produce(server: Any, topic: str, per_partition: int, first: int = 0) -> None:
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for i in range(first, first + per_partition):
            producer.produce(topic, value=f"{partition}:{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def _sessions_metric(server: Any, kind: str) -> float:
    return server.metric(f'stratalog_kafka_fetch_requests_total{{session="{kind}"}}')


def test_kafka_python_consumes_many_partitions_through_a_session(server):
    topic = f"fs-{uuid.uuid4().hex[:10]}"
    with SyncClient(server.target) as client:
        client.create_topic(topic, partitions=PARTITIONS)
    _produce(server, topic, 10)
    incremental_before = _sessions_metric(server, "incremental")
    consumer = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap, group_id=None,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    expected = {f"{p}:{i}" for p in range(PARTITIONS) for i in range(20)}
    seen: set[str] = set()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while len(seen) < 10 * PARTITIONS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                seen.update(r.value.decode() for r in records)
        # The second half arrives while the consumer's session is open: by incremental
        # fetches that name only the partitions with records.
        _produce(server, topic, 10, first=10)
        while len(seen) < 20 * PARTITIONS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                seen.update(r.value.decode() for r in records)
        assert seen == expected
        assert server.metric("stratalog_kafka_fetch_sessions") >= 1
        assert server.metric("stratalog_kafka_fetch_session_partitions") >= PARTITIONS
        assert _sessions_metric(server, "incremental") > incremental_before
    finally:
        consumer.close()


def test_librdkafka_reads_without_a_session(server):
    topic = f"fs-{uuid.uuid4().hex[:10]}"
    with SyncClient(server.target) as client:
        client.create_topic(topic, partitions=PARTITIONS)
    _produce(server, topic, 5)
    sessionless_before = _sessions_metric(server, "sessionless")
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "g-" + topic,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([RdTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 5 * PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.add(message.value().decode())
    finally:
        consumer.close()
    assert seen == {f"{p}:{i}" for p in range(PARTITIONS) for i in range(5)}
    assert _sessions_metric(server, "sessionless") > sessionless_before


def test_kafka_python_keeps_reading_through_a_failover_with_sessions(start_member):
    """Three servers, each its own session cache: kafka-python's consumer holds a session on
    every leader it reads from; the leader of partition 0 is killed, its partitions move to a
    survivor, where the consumer's session takes them in (or starts over), and every
    acknowledged record is read."""
    servers = start_cluster(start_member)
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic, partitions=6)
    leader = leader_of(servers, topic)
    wait_for(lambda: all(len(_kafka_brokers(s)) == 3 for s in servers.values()),
             "three Kafka listeners registered and seen by every server")
    bootstrap = ",".join(s.kafka_bootstrap for s in servers.values())
    acked: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        acked.append(message.value().decode())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60_000, "retries": 1_000_000,
                         "topic.metadata.refresh.interval.ms": 1_000})

    def send(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(topic, value=f"{i % 6}:{i}".encode(), partition=i % 6,
                             on_delivery=delivered)
        assert producer.flush(FAILOVER_BOUND_S * 3) == 0

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100,
                             metadata_max_age_ms=1_000)
    seen: set[str] = set()

    def read_until(count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(seen) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                seen.update(r.value.decode() for r in records)

    try:
        consumer.assign([TopicPartition(topic, p) for p in range(6)])
        send(0, 120)
        read_until(120, 60)
        assert seen == set(acked)
        # The first fetch from each leader is full; the consumer's next ones are incremental
        # (it polls on at the end of the partitions).
        wait_for(lambda: (read_until(len(seen) + 1, 0.1),
                          _sessions_metric(servers[leader], "incremental") > 0)[1],
                 "an incremental fetch at the leader of partition 0")
        incremental = {n: _sessions_metric(s, "incremental") for n, s in servers.items()}
        servers[leader].process.send_signal(signal.SIGKILL)
        servers[leader].process.wait()
        survivors = {n: s for n, s in servers.items() if n != leader}
        leader_of(survivors, topic, not_node=leader)
        send(120, 120)
        read_until(240, FAILOVER_BOUND_S * 3)
        assert seen == set(acked) and len(acked) == 240
        # The survivors serve the partitions they took over through sessions too.
        wait_for(lambda: (read_until(len(seen) + 1, 0.1), sum(
            _sessions_metric(s, "incremental") - incremental[n]
            for n, s in survivors.items()) > 0)[1],
            "incremental fetches at the survivors")
        assert seen == set(acked)
    finally:
        consumer.close()
        producer.flush(1)


def _kafka_brokers(server: Any) -> list[Any]:
    from kafka.protocol.metadata import MetadataRequest

    from tests.kafka.kafka_wire import KafkaWire, ask

    with KafkaWire(server.kafka_bootstrap) as sock:
        return ask(sock, MetadataRequest(topics=[], allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False), 12).brokers
