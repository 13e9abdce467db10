"""docs/kafka-protocol.md's table of APIs is what ApiVersions advertises: every API key served,
with its version range, and nothing that is not served."""

from __future__ import annotations

import re
from pathlib import Path

from kafka.protocol.api_key import ApiKey

import stratalog.server.kafka  # noqa: F401  (registers every API)
from stratalog.server.kafka.apis.registry import HANDLERS, SERVED_VERSIONS

DOC = Path(__file__).resolve().parents[3] / "docs" / "kafka-protocol.md"
_ROW = re.compile(r"^\| (\w+) \((\d+)\) \| (\d+)–(\d+) \|", re.MULTILINE)


def test_the_docs_table_is_the_served_versions():
    rows = {int(key): (name, int(low), int(high))
            for name, key, low, high in _ROW.findall(DOC.read_text())}
    assert {key: (low, high) for key, (_, low, high) in rows.items()} == {
        int(key): versions for key, versions in SERVED_VERSIONS.items()}
    for key, (name, _, _) in rows.items():
        assert ApiKey(key).name == name


def test_every_handler_is_served_in_the_versions_kafka_python_knows():
    from stratalog.server.kafka.codec import REQUEST_CLASSES, RESPONSE_CLASSES

    for key, api in HANDLERS.items():
        assert 0 <= api.min_version <= api.max_version <= REQUEST_CLASSES[key].max_version
        assert api.max_version <= RESPONSE_CLASSES[key].max_version
