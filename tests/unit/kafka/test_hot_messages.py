"""server/kafka/hot_messages.py against kafka-python's classes (generated from Kafka's own JSON
schemas) as the oracle, both ways, for random messages of every version served:

* requests: kafka-python encodes, the hand-written decoder reads the same fields;
* responses: the same response built with both, the bytes are equal.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest as KFetchRequest
from kafka.protocol.consumer import FetchResponse as KFetchResponse
from kafka.protocol.producer import ProduceRequest as KProduceRequest
from kafka.protocol.producer import ProduceResponse as KProduceResponse

from stratalog.server.kafka import hot_messages as hot
from stratalog.server.kafka.hot_messages import (
    FETCH_VERSIONS,
    PRODUCE_VERSIONS,
    HotDecodeError,
    decode_fetch_request,
    decode_produce_request,
    encode_fetch_response,
    encode_produce_response,
)

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
NAME = st.text(max_size=20)
NULLABLE_NAME = st.none() | NAME
RECORDS = st.none() | st.binary(max_size=300)
produce_versions = st.integers(*PRODUCE_VERSIONS)
fetch_versions = st.integers(*FETCH_VERSIONS)


def plain(value: Any) -> Any:
    """A message (either library's) as nested dicts and lists, for comparison."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, hot._Message):
        return {n: plain(getattr(value, n)) for n, _ in value._DEFAULTS}
    if hasattr(value, "fields") and hasattr(value, "to_dict"):
        return {n: plain(getattr(value, n)) for n in type(value).fields}
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def project(theirs: Any, ours: Any) -> Any:
    """``theirs`` with only the fields ``ours`` has (kafka-python's schemas are newer: fields
    of versions not served here, e.g. Produce v13's topic_id)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return {k: project(theirs.get(k), v) for k, v in ours.items()}
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [project(t, o) for t, o in zip(theirs, ours, strict=True)]
    return theirs


def present(version: int, fields: dict[str, Any], absent: dict[str, tuple[int, int]]
            ) -> dict[str, Any]:
    """``fields`` without those a version does not have (``absent``: name -> versions held)."""
    return {n: v for n, v in fields.items()
            if n not in absent or absent[n][0] <= version <= absent[n][1]}


# --------------------------------------------------------------------------- Produce


@st.composite
def produce_requests(draw: st.DrawFn) -> tuple[int, Any]:
    version = draw(produce_versions)
    P = KProduceRequest.TopicProduceData.PartitionProduceData
    topics = [KProduceRequest.TopicProduceData(
        name=draw(NAME),
        partition_data=[P(index=draw(INT32), records=draw(RECORDS))
                        for _ in range(draw(st.integers(0, 3)))])
        for _ in range(draw(st.integers(0, 3)))]
    return version, KProduceRequest(transactional_id=draw(NULLABLE_NAME), acks=draw(INT16),
                                    timeout_ms=draw(INT32), topic_data=topics)


@settings(max_examples=300, deadline=None)
@given(produce_requests())
def test_a_produce_request_decodes_as_kafka_python_encoded_it(case: tuple[int, Any]) -> None:
    version, request = case
    body = request.encode(version=version)
    ours = decode_produce_request(b"prefix" + body, 6, version)
    assert version == ours.API_VERSION
    theirs = plain(KProduceRequest.decode(body, version=version))
    assert plain(ours) == project(theirs, plain(ours))


@st.composite
def produce_responses(draw: st.DrawFn) -> tuple[int, Any, Any]:
    version = draw(produce_versions)
    topics_k, topics_h = [], []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(NAME)
        parts_k, parts_h = [], []
        for _ in range(draw(st.integers(0, 3))):
            fields = dict(index=draw(INT32), error_code=draw(INT16), base_offset=draw(INT64),
                          log_append_time_ms=draw(INT64), log_start_offset=draw(INT64),
                          error_message=draw(NULLABLE_NAME))
            errors = [(draw(INT32), draw(NULLABLE_NAME)) for _ in range(draw(st.integers(0, 2)))]
            leader = draw(st.none() | st.tuples(INT32, INT32))
            KP = KProduceResponse.TopicProduceResponse.PartitionProduceResponse
            HP = hot.ProduceResponse.TopicProduceResponse.PartitionProduceResponse
            parts_k.append(KP(
                **fields,
                record_errors=[KP.BatchIndexAndErrorMessage(
                    batch_index=i, batch_index_error_message=m) for i, m in errors],
                current_leader=None if leader is None else KP.LeaderIdAndEpoch(
                    leader_id=leader[0], leader_epoch=leader[1])))
            parts_h.append(HP(
                **fields,
                record_errors=[HP.BatchIndexAndErrorMessage(
                    batch_index=i, batch_index_error_message=m) for i, m in errors],
                current_leader=None if leader is None else HP.LeaderIdAndEpoch(
                    leader_id=leader[0], leader_epoch=leader[1])))
        topics_k.append(KProduceResponse.TopicProduceResponse(name=name,
                                                              partition_responses=parts_k))
        topics_h.append(hot.ProduceResponse.TopicProduceResponse(name=name,
                                                                 partition_responses=parts_h))
    throttle = draw(INT32)
    endpoints = [(draw(INT32), draw(NAME), draw(INT32), draw(NULLABLE_NAME))
                 for _ in range(draw(st.integers(0, 2)))]
    k = KProduceResponse(responses=topics_k, throttle_time_ms=throttle, node_endpoints=[
        KProduceResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=r)
        for i, h, p, r in endpoints])
    h = hot.ProduceResponse(responses=topics_h, throttle_time_ms=throttle, node_endpoints=[
        hot.ProduceResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=r)
        for i, h, p, r in endpoints])
    return version, k, h


@settings(max_examples=300, deadline=None)
@given(produce_responses())
def test_a_produce_response_encodes_as_kafka_python_does(case: tuple[int, Any, Any]) -> None:
    version, theirs, ours = case
    assert encode_produce_response(ours, version) == theirs.encode(version=version)


# --------------------------------------------------------------------------- Fetch


@st.composite
def fetch_requests(draw: st.DrawFn) -> tuple[int, Any]:
    version = draw(fetch_versions)
    FP = KFetchRequest.FetchTopic.FetchPartition
    topics = [KFetchRequest.FetchTopic(topic=draw(NAME), partitions=[
        FP(partition=draw(INT32), current_leader_epoch=draw(INT32), fetch_offset=draw(INT64),
           last_fetched_epoch=draw(INT32), log_start_offset=draw(INT64),
           partition_max_bytes=draw(INT32)) for _ in range(draw(st.integers(0, 3)))])
        for _ in range(draw(st.integers(0, 3)))]
    forgotten = [KFetchRequest.ForgottenTopic(topic=draw(NAME), partitions=draw(
        st.lists(INT32, max_size=3))) for _ in range(draw(st.integers(0, 2)))]
    request = KFetchRequest(
        cluster_id=draw(NULLABLE_NAME), replica_id=draw(INT32), max_wait_ms=draw(INT32),
        min_bytes=draw(INT32), max_bytes=draw(INT32), isolation_level=draw(INT8),
        session_id=draw(INT32), session_epoch=draw(INT32), topics=topics,
        forgotten_topics_data=forgotten, rack_id=draw(NAME))
    return version, request


_FETCH_REQUEST_FIELDS = {"session_id": (7, 99), "session_epoch": (7, 99),
                         "forgotten_topics_data": (7, 99), "rack_id": (11, 99),
                         "cluster_id": (12, 99)}
_FETCH_PARTITION_FIELDS = {"current_leader_epoch": (9, 99), "last_fetched_epoch": (12, 99),
                           "log_start_offset": (5, 99)}


@settings(max_examples=300, deadline=None)
@given(fetch_requests())
def test_a_fetch_request_decodes_as_kafka_python_encoded_it(case: tuple[int, Any]) -> None:
    version, request = case
    body = request.encode(version=version)
    ours = plain(decode_fetch_request(body, 0, version))
    theirs = project(plain(KFetchRequest.decode(body, version=version)), ours)
    assert present(version, ours, _FETCH_REQUEST_FIELDS) == present(
        version, theirs, _FETCH_REQUEST_FIELDS)
    for our_topic, their_topic in zip(ours["topics"], theirs["topics"], strict=True):
        for mine, theirs_p in zip(our_topic["partitions"], their_topic["partitions"],
                                  strict=True):
            # A field the version does not have is its schema default (-1 for these three).
            assert all(v == -1 for k, v in mine.items()
                       if k not in present(version, mine, _FETCH_PARTITION_FIELDS))
            assert present(version, mine, _FETCH_PARTITION_FIELDS) == present(
                version, theirs_p, _FETCH_PARTITION_FIELDS)


@st.composite
def fetch_responses(draw: st.DrawFn) -> tuple[int, Any, Any]:
    version = draw(fetch_versions)
    KT = KFetchResponse.FetchableTopicResponse
    KP = KT.PartitionData
    HT = hot.FetchResponse.FetchableTopicResponse
    HP = HT.PartitionData
    topics_k, topics_h = [], []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(NAME)
        parts_k, parts_h = [], []
        for _ in range(draw(st.integers(0, 3))):
            fields = dict(partition_index=draw(INT32), error_code=draw(INT16),
                          high_watermark=draw(INT64), last_stable_offset=draw(INT64),
                          log_start_offset=draw(INT64), preferred_read_replica=draw(INT32),
                          records=draw(RECORDS))
            aborted = draw(st.none() | st.lists(st.tuples(INT64, INT64), max_size=2))
            diverging = draw(st.none() | st.tuples(INT32, INT64))
            leader = draw(st.none() | st.tuples(INT32, INT32))
            snapshot = draw(st.none() | st.tuples(INT64, INT32))

            def build(P: Any, aborted: Any = aborted, diverging: Any = diverging,
                      leader: Any = leader, snapshot: Any = snapshot, fields: Any = fields
                      ) -> Any:
                return P(
                    **fields,
                    aborted_transactions=None if aborted is None else [
                        P.AbortedTransaction(producer_id=p, first_offset=f) for p, f in aborted],
                    diverging_epoch=None if diverging is None else P.EpochEndOffset(
                        epoch=diverging[0], end_offset=diverging[1]),
                    current_leader=None if leader is None else P.LeaderIdAndEpoch(
                        leader_id=leader[0], leader_epoch=leader[1]),
                    snapshot_id=None if snapshot is None else P.SnapshotId(
                        end_offset=snapshot[0], epoch=snapshot[1]))

            parts_k.append(build(KP))
            parts_h.append(build(HP))
        topics_k.append(KT(topic=name, partitions=parts_k))
        topics_h.append(HT(topic=name, partitions=parts_h))
    top = dict(throttle_time_ms=draw(INT32), error_code=draw(INT16), session_id=draw(INT32))
    return (version, KFetchResponse(**top, responses=topics_k),
            hot.FetchResponse(**top, responses=topics_h))


@settings(max_examples=300, deadline=None)
@given(fetch_responses())
def test_a_fetch_response_encodes_as_kafka_python_does(case: tuple[int, Any, Any]) -> None:
    version, theirs, ours = case
    pieces = encode_fetch_response(ours, version)
    assert b"".join(bytes(p) for p in pieces) == theirs.encode(version=version)


def test_fetch_records_are_pieces_of_their_own_not_copied() -> None:
    records = memoryview(b"x" * 1000)
    P = hot.FetchResponse.FetchableTopicResponse.PartitionData
    response = hot.FetchResponse(responses=[hot.FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[P(partition_index=0, records=records)])])
    pieces = encode_fetch_response(response, 12)
    assert pieces[1] is records
    assert len(pieces) == 3


# --------------------------------------------------------------------------- bad input


@settings(max_examples=300, deadline=None)
@given(fetch_requests(), st.data())
def test_a_cut_fetch_request_is_refused_with_the_field_named(case: tuple[int, Any],
                                                             data: st.DataObject) -> None:
    version, request = case
    body = request.encode(version=version)
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(HotDecodeError, match=r"cut short|longer than|cannot fit|length"):
        decode_fetch_request(body[:cut], 0, version)


@pytest.mark.parametrize("version", [3, 9])
def test_a_huge_array_count_is_refused_before_anything_is_allocated(version: int) -> None:
    flexible = version >= 9
    # transactional_id null, acks 1, timeout 0, then a count of 2^31 - 1 topics.
    body = (b"\x00" if flexible else b"\xff\xff") + b"\x00\x01\x00\x00\x00\x00" + (
        b"\xff\xff\xff\xff\x07" if flexible else b"\x7f\xff\xff\xff")
    with pytest.raises(HotDecodeError, match=r"topic_data of .* items cannot fit"):
        decode_produce_request(body, 0, version)


def test_a_negative_records_length_other_than_null_is_refused() -> None:
    body = b"\xff\xff\x00\x01\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + (
        b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xfe")
    with pytest.raises(HotDecodeError, match="records has length -2"):
        decode_produce_request(body, 0, 3)
