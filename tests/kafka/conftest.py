"""The Kafka front end's tests: a real server process with its Kafka listener, and real Kafka
clients (kafka-python, aiokafka, confluent-kafka, kcat).

The ``server`` and ``start_server`` fixtures are tests/integration/conftest.py's; a server they
start listens for Kafka clients on a free port: ``server.kafka_bootstrap``. ``etcd`` and
``start_member`` (a server joined to that etcd, with its Kafka listener) are
tests/cluster/conftest.py's, for the cluster-mode tests (test_kafka_cluster.py). ``kcat`` is the path
of Debian's kcat, or the test is skipped with a line that says it is missing (`make test`
installs it where apt-get can).
"""

from __future__ import annotations

import shutil

import pytest

from tests.cluster.conftest import etcd, start_member  # noqa: F401  (fixtures)
from tests.integration.conftest import server, start_server  # noqa: F401  (fixtures)


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (Debian's kcat package: apt-get install kcat)")
    return path
