"""The Kafka listener's protocol, request by request, with kafka-python's message classes as the
oracle (tests/kafka/kafka_wire.py): ApiVersions and KIP-511, Metadata's topic selection and
auto-creation, Produce's acks and old formats, Fetch's long poll, bounds and sessions,
ListOffsets' targets, pipelining in order, and what closes a connection."""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from stratalog.client import SyncClient
from stratalog.records import build_batch
from stratalog.server.kafka.apis.registry import SERVED_VERSIONS

from .kafka_wire import KafkaWire, encode_request

_MetadataTopic = MetadataRequest.MetadataRequestTopic
_ProduceTopic = ProduceRequest.TopicProduceData
_ProducePartition = _ProduceTopic.PartitionProduceData
_FetchTopic = FetchRequest.FetchTopic
_FetchPartition = _FetchTopic.FetchPartition
_OffsetsTopic = ListOffsetsRequest.ListOffsetsTopic
_OffsetsPartition = _OffsetsTopic.ListOffsetsPartition


def _topic() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def _batch(values: list[bytes], t0: int = 1_700_000_000_000) -> bytes:
    return build_batch([(t0 + i, None, value, ()) for i, value in enumerate(values)])


def _produce(wire: KafkaWire, topic: str, records: bytes, acks: int = 1, version: int = 9,
             partition: int = 0) -> object:
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10_000, topic_data=[
        _ProduceTopic(name=topic, partition_data=[_ProducePartition(index=partition,
                                                                    records=records)])])
    return wire.call(request, ProduceResponse, version)


def _fetch_request(topic: str, offset: int, max_wait_ms: int = 0, min_bytes: int = 1,
                   isolation: int = 0, session_id: int = 0, session_epoch: int = -1,
                   partition_max_bytes: int = 1 << 20) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
        isolation_level=isolation, session_id=session_id, session_epoch=session_epoch,
        topics=[_FetchTopic(topic=topic, partitions=[_FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=partition_max_bytes)])],
        forgotten_topics_data=[], rack_id="",
    )


def _list_offsets(wire: KafkaWire, topic: str, target: int, version: int = 7) -> object:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[_OffsetsTopic(
        name=topic, partitions=[_OffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                  timestamp=target)])])
    response = wire.call(request, ListOffsetsResponse, version)
    return response.topics[0].partitions[0]


def test_api_versions_lists_every_served_range(server):
    with KafkaWire(server.kafka_bootstrap) as wire:
        response = wire.call(ApiVersionsRequest(client_software_name="tests",
                                                client_software_version="1"),
                             ApiVersionsResponse, 3)
    assert response.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == {
        int(key): versions for key, versions in SERVED_VERSIONS.items()}
    # librdkafka turns compression off when Produce's lowest version is above 0 (KAFKA-18659).
    assert SERVED_VERSIONS[0][0] == 0


def test_api_versions_of_a_version_not_served_answers_v0_with_the_ranges(server):
    """KIP-511: the client learns the ranges from a version 0 answer with UNSUPPORTED_VERSION
    (its header never flexible), and the connection stays open."""
    with KafkaWire(server.kafka_bootstrap) as wire:
        frame = bytearray(encode_request(ApiVersionsRequest(), 0, 7))
        struct.pack_into(">h", frame, 6, 99)  # api_version 99
        wire.send_raw(bytes(frame))
        correlation_id, response = wire.receive(ApiVersionsResponse, 0, flexible_header=False)
        assert correlation_id == 7 and response.error_code == 35
        assert any(k.api_key == 18 and k.max_version == 3 for k in response.api_keys)
        again = wire.call(ApiVersionsRequest(), ApiVersionsResponse, 0)
        assert again.error_code == 0


@pytest.mark.parametrize("mutation", ["unknown key", "unserved version", "garbage body",
                                      "huge size", "tiny size"])
def test_a_frame_that_is_not_kafka_closes_the_connection_and_the_server_goes_on(server,
                                                                                  mutation):
    with KafkaWire(server.kafka_bootstrap) as wire:
        frame = bytearray(encode_request(MetadataRequest(topics=[]), 1, 1))
        if mutation == "unknown key":
            struct.pack_into(">h", frame, 4, 999)
        elif mutation == "unserved version":
            struct.pack_into(">h", frame, 6, 77)
        elif mutation == "garbage body":
            frame = frame[:14] + b"\xff\xff\xff\x7f"  # 2**31 topics
            struct.pack_into(">i", frame, 0, len(frame) - 4)
        elif mutation == "huge size":
            frame = bytearray(struct.pack(">i", 2**31 - 1) + b"\x00" * 16)
        else:
            frame = bytearray(struct.pack(">i", 3) + b"\x00\x03\x00")
        wire.send_raw(bytes(frame))
        assert wire.closed_by_server()
    with KafkaWire(server.kafka_bootstrap) as wire:
        assert wire.call(ApiVersionsRequest(), ApiVersionsResponse, 0).error_code == 0


def test_metadata_names_the_listener_and_each_topic_error(server):
    topic = _topic()
    with SyncClient(server.target) as client:
        client.create_topic(topic, 3)
    with KafkaWire(server.kafka_bootstrap) as wire:
        response = wire.call(MetadataRequest(
            topics=[_MetadataTopic(name=topic), _MetadataTopic(name="no-such-" + topic),
                    _MetadataTopic(name="bad/name")],
            allow_auto_topic_creation=False), MetadataResponse, 9)
        everything = wire.call(MetadataRequest(topics=None), MetadataResponse, 1)
        v0_all = wire.call(MetadataRequest(topics=[]), MetadataResponse, 0)
        v1_none = wire.call(MetadataRequest(topics=[]), MetadataResponse, 1)
    [broker] = response.brokers
    assert (broker.host, broker.port) == ("127.0.0.1", server.kafka_port)
    found, unknown, bad = response.topics
    assert (found.name, found.error_code, len(found.partitions)) == (topic, 0, 3)
    assert all(p.leader_id == broker.node_id and p.isr_nodes == [broker.node_id]
               for p in found.partitions)
    assert unknown.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION (not created: not allowed)
    assert bad.error_code == 17  # INVALID_TOPIC_EXCEPTION
    assert topic in {t.name for t in everything.topics}
    assert topic in {t.name for t in v0_all.topics}  # v0: an empty list means every topic
    assert v1_none.topics == []  # v1+: an empty list means none
    assert response.cluster_id  # meta.properties' cluster.id


def test_metadata_creates_a_topic_when_allowed(server):
    topic = _topic()
    with KafkaWire(server.kafka_bootstrap) as wire:
        first = wire.call(MetadataRequest(topics=[_MetadataTopic(name=topic)],
                                          allow_auto_topic_creation=True), MetadataResponse, 9)
        second = wire.call(MetadataRequest(topics=[_MetadataTopic(name=topic)],
                                           allow_auto_topic_creation=True), MetadataResponse, 9)
    assert first.topics[0].error_code == 5  # LEADER_NOT_AVAILABLE: created, ask again
    assert second.topics[0].error_code == 0 and second.topics[0].partitions


def test_produce_acks_and_old_formats(server):
    topic = _topic()
    with SyncClient(server.target) as client:
        client.create_topic(topic, 1)
    with KafkaWire(server.kafka_bootstrap) as wire:
        ok = _produce(wire, topic, _batch([b"a", b"b"])).responses[0].partition_responses[0]
        assert (ok.error_code, ok.base_offset, ok.log_start_offset) == (0, 0, 0)
        bad_acks = _produce(wire, topic, _batch([b"c"]), acks=2)
        assert bad_acks.responses[0].partition_responses[0].error_code == 21
        old = _produce(wire, topic, _batch([b"d"]), version=2)
        assert old.responses[0].partition_responses[0].error_code == 43
        unknown = _produce(wire, "no-such-" + topic, _batch([b"e"]))
        assert unknown.responses[0].partition_responses[0].error_code == 3
        corrupt = bytearray(_batch([b"f"]))
        corrupt[-1] ^= 0xFF  # the CRC no longer matches
        refused = _produce(wire, topic, bytes(corrupt)).responses[0].partition_responses[0]
        assert refused.error_code == 2 and refused.error_message  # CORRUPT_MESSAGE
        # acks=0: no answer at all; the next request's answer is the next one read.
        wire.send(ProduceRequest(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[
            _ProduceTopic(name=topic, partition_data=[_ProducePartition(
                index=0, records=_batch([b"g"]))])]), 9)
        after = _list_offsets(wire, topic, -1)
        assert after.offset == 3
    with SyncClient(server.target) as client:
        values = [r.value for r in client.fetch_by_offset(topic, 0, 0).records]
    assert values == [b"a", b"b", b"g"]


def test_pipelined_requests_are_answered_in_order(server):
    topic = _topic()
    with SyncClient(server.target) as client:
        client.create_topic(topic, 1)
    with KafkaWire(server.kafka_bootstrap) as wire:
        sent = []
        for i in range(20):
            request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000,
                                     topic_data=[_ProduceTopic(name=topic, partition_data=[
                                         _ProducePartition(index=0, records=_batch([b"%d" % i]))
                                     ])])
            sent.append(wire.send(request, 9))
        answers = [wire.receive(ProduceResponse, 9) for _ in sent]
    assert [c for c, _ in answers] == sent
    assert [r.responses[0].partition_responses[0].base_offset for _, r in answers] == list(
        range(20))


def test_fetch_reads_batches_with_the_bounds(server):
    topic = _topic()
    with SyncClient(server.target) as client:
        client.create_topic(topic, 1)
    with KafkaWire(server.kafka_bootstrap) as wire:
        _produce(wire, topic, _batch([b"x", b"y"]))
        _produce(wire, topic, _batch([b"z"]))
        response = wire.call(_fetch_request(topic, 1), FetchResponse, 12)
        out_of_range = wire.call(_fetch_request(topic, 50), FetchResponse, 11)
        session = wire.call(_fetch_request(topic, 0, session_id=5, session_epoch=1),
                            FetchResponse, 11)
    partition = response.responses[0].partitions[0]
    assert (partition.error_code, partition.high_watermark, partition.last_stable_offset,
            partition.log_start_offset) == (0, 3, 3, 0)
    assert response.session_id == 0  # epoch -1: sessionless (KIP-227)
    # Whole batches from the one holding offset 1: the client skips what it did not ask for.
    from kafka.record import MemoryRecords

    records = MemoryRecords(bytes(partition.records))
    offsets = []
    while (batch := records.next_batch()) is not None:
        offsets.extend(r.offset for r in batch)
    assert offsets == [0, 1, 2]
    gone = out_of_range.responses[0].partitions[0]
    assert (gone.error_code, gone.high_watermark, gone.log_start_offset) == (1, 3, 0)
    assert session.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND: no session 5 here


def test_fetch_long_poll_answers_when_a_record_arrives(server):
    topic = _topic()
    with SyncClient(server.target) as client:
        client.create_topic(topic, 1)
    answer: list[object] = []

    def poll() -> None:
        with KafkaWire(server.kafka_bootstrap) as wire:
            answer.append(wire.call(_fetch_request(topic, 0, max_wait_ms=20_000),
                                    FetchResponse, 12))

    waiter = threading.Thread(target=poll)
    started = time.monotonic()
    waiter.start()
    deadline = started + 20
    while server.waiting_rpcs("long_poll") < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.waiting_rpcs("long_poll") >= 1, "the fetch never waited"
    with KafkaWire(server.kafka_bootstrap) as wire:
        _produce(wire, topic, _batch([b"woke"]))
    waiter.join(30)
    partition = answer[0].responses[0].partitions[0]
    assert partition.error_code == 0 and partition.high_watermark == 1
    assert len(partition.records) > 0
    assert time.monotonic() - started < 20, "answered at the deadline, not at the write"


def test_list_offsets_targets(server):
    topic = _topic()
    with SyncClient(server.target) as client:
        client.create_topic(topic, 1)
    with KafkaWire(server.kafka_bootstrap) as wire:
        _produce(wire, topic, _batch([b"a", b"b", b"c"], t0=1_000))
        _produce(wire, topic, _batch([b"d"], t0=5_000))
        earliest = _list_offsets(wire, topic, -2)
        latest = _list_offsets(wire, topic, -1)
        max_timestamp = _list_offsets(wire, topic, -3)
        at_1001 = _list_offsets(wire, topic, 1_001)
        after_all = _list_offsets(wire, topic, 9_000)
        old_version_max = _list_offsets(wire, topic, -3, version=6)
    assert (earliest.error_code, earliest.offset) == (0, 0)
    assert latest.offset == 4
    assert (max_timestamp.offset, max_timestamp.timestamp) == (3, 5_000)
    assert (at_1001.offset, at_1001.timestamp) == (1, 1_001)
    assert (after_all.offset, after_all.timestamp) == (-1, -1)
    assert old_version_max.error_code == 35  # -3 needs v7 (KIP-734)


def test_metrics_count_requests_connections_and_closes(server):
    requests_before = server.metric('stratalog_kafka_requests_total{api="Metadata"}')
    closed_before = server.metric(
        'stratalog_kafka_connections_closed_total{reason="bad_request"}')
    with KafkaWire(server.kafka_bootstrap) as wire:
        wire.call(MetadataRequest(topics=[]), MetadataResponse, 1)
        assert server.metric("stratalog_kafka_connections") >= 1
        assert server.metric(
            'stratalog_kafka_requests_total{api="Metadata"}') == requests_before + 1
        assert server.metric(
            'stratalog_kafka_request_seconds_count{api="Metadata"}') >= 1
        wire.send_raw(struct.pack(">i", 5) + b"\x00" * 5)
        assert wire.closed_by_server()
    assert server.metric(
        'stratalog_kafka_connections_closed_total{reason="bad_request"}') == closed_before + 1
