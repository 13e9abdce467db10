"""Shared test fixtures: paths to the design material beside the project."""

from __future__ import annotations

from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# ../shared beside the project holds the Kafka-written fixtures.
KAFKA_WRITTEN = PROJECT_ROOT.parent / "shared" / "fixtures" / "kafka-written"


@pytest.fixture(scope="session")
def kafka_written_dir() -> Path:
    if not KAFKA_WRITTEN.is_dir():
        pytest.fail(f"Kafka-written fixtures not found at {KAFKA_WRITTEN}")
    return KAFKA_WRITTEN
