"""Shared test fixtures: the Kafka-written segment files kept in tests/fixtures."""

from __future__ import annotations

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
