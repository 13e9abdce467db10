"""benchmarks/kafka_wire.py's hand-written requests: byte for byte what kafka-python's classes
(generated from Kafka's schemas) encode for the same fields, so that the benchmark's client
sends what a library would."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

# benchmarks/ is a folder of scripts run from the repository root, not an installed package.
PROJECT_ROOT = Path(__file__).resolve().parents[3]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.kafka_wire import (  # noqa: E402
    FETCH_VERSION,
    PRODUCE_VERSION,
    KafkaWire,
    fetch_frame,
    produce_frame,
)

_TOPICS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
                  max_size=300)
_CLIENT_IDS = st.text(max_size=40)


@given(topic=_TOPICS, client_id=_CLIENT_IDS, partition=st.integers(0, 2**31 - 1),
       records=st.binary(max_size=300), acks=st.sampled_from([1, -1]),
       correlation_id=st.integers(0, 2**31 - 1), timeout_ms=st.integers(0, 2**31 - 1))
def test_produce_frame_is_kafka_pythons_encoding(topic, client_id, partition, records, acks,
                                                 correlation_id, timeout_ms):
    request = KafkaWire().produce_request(topic, partition, records, acks, timeout_ms)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    expected = request.encode(version=PRODUCE_VERSION, header=True, framed=True)
    assert b"".join(produce_frame(correlation_id, client_id, topic, partition, records, acks,
                                  timeout_ms)) == expected


@given(topic=_TOPICS, client_id=_CLIENT_IDS, partition=st.integers(0, 2**31 - 1),
       offset=st.integers(0, 2**63 - 1), max_bytes=st.integers(0, 2**31 - 1),
       max_wait_ms=st.integers(0, 2**31 - 1), min_bytes=st.integers(0, 2**31 - 1),
       isolation_level=st.sampled_from([0, 1]), correlation_id=st.integers(0, 2**31 - 1))
def test_fetch_frame_is_kafka_pythons_encoding(topic, client_id, partition, offset, max_bytes,
                                               max_wait_ms, min_bytes, isolation_level,
                                               correlation_id):
    request = KafkaWire().fetch_request(topic, partition, offset, max_bytes, max_wait_ms,
                                        min_bytes, isolation_level)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    expected = request.encode(version=FETCH_VERSION, header=True, framed=True)
    assert fetch_frame(correlation_id, client_id, topic, partition, offset, max_bytes,
                       max_wait_ms, min_bytes, isolation_level) == expected
