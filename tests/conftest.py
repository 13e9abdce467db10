"""Shared test fixtures: the Kafka-written segment files kept in tests/fixtures, and batches no
builder writes."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Real Apache Kafka output, committed byte for byte (tests/fixtures/kafka-written/README.md).
KAFKA_WRITTEN = PROJECT_ROOT / "tests" / "fixtures" / "kafka-written"


@pytest.fixture(scope="session")
def kafka_written_dir() -> Path:
    if not KAFKA_WRITTEN.is_dir():
        pytest.fail(f"Kafka-written fixtures not found at {KAFKA_WRITTEN}")
    return KAFKA_WRITTEN


@pytest.fixture(scope="session")
def batch_with_timestamp_delta() -> Callable[[int, int], bytes]:
    """``make(base_timestamp, delta)``: a CRC-valid one-record batch (base offset 0, value
    ``b"v"``) whose record's timestamp is ``base_timestamp + delta``, any int64s, even when the
    sum leaves int64 (which no builder writes: the probe's batches of issue 13, defect 5).

    The batch is built with a timestamp delta of 0, whose one-byte varint is then replaced by
    the delta's (small deltas only), the base and max timestamps set, and the CRC recomputed.
    """
    from stratalog.records.batch import rewrite_crc
    from stratalog.records.builder import build_batch
    from stratalog.records.varint import varlong_bytes

    delta_position = 61 + 2  # after the header: the record's length varint and attributes

    def make(base_timestamp: int, delta: int) -> bytes:
        batch = bytearray(build_batch([(0, None, b"v", ())]))
        encoded = varlong_bytes(delta)
        assert len(encoded) == 1 and batch[delta_position] == 0, "a small delta, in place of 0"
        batch[delta_position] = encoded[0]
        struct.pack_into(">qq", batch, 27, base_timestamp, base_timestamp)  # base, max
        rewrite_crc(batch, 0, len(batch))
        return bytes(batch)

    return make
