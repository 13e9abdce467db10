"""The pytest side of ``make docker-test``: checks run from the host against a live container.

deploy/docker-test.sh builds the image, starts a container on the host network and runs one
phase of these tests against it, through the client library, with:

``STRATALOG_DOCKER_TEST_TARGET``       ``127.0.0.1:PORT`` of the container's gRPC server
``STRATALOG_DOCKER_TEST_METRICS_URL``  ``http://127.0.0.1:PORT/metrics`` of its Prometheus endpoint
``STRATALOG_DOCKER_TEST_KAFKA``        ``127.0.0.1:PORT`` of its Kafka listener (issue 28)
``STRATALOG_DOCKER_TEST_PHASE``        ``first``: a fresh volume; create, produce, read back
                                       ``restarted``: a new container on the same volume after a
                                       SIGTERM stop; every record of ``first`` must be there

Only the module of that phase is collected, and none without a target: a plain ``pytest`` on the
host has no container to talk to (make docker-test is what starts one).

The data is a pure function of the partition number (seeded random values, fixed timestamps), so
the ``restarted`` phase knows every record the ``first`` one wrote without any file passed
between them. Timestamps are fixed in 2023; the topic has ``retention.ms=-1`` so that retention
never deletes them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from stratalog.client import ConsumerRecord, ProducerRecord, SyncClient
from stratalog.records import Compression

TARGET_ENV = "STRATALOG_DOCKER_TEST_TARGET"
METRICS_URL_ENV = "STRATALOG_DOCKER_TEST_METRICS_URL"
KAFKA_ENV = "STRATALOG_DOCKER_TEST_KAFKA"
PHASE_ENV = "STRATALOG_DOCKER_TEST_PHASE"
PHASE_MODULES = {"first": "test_first_container.py", "restarted": "test_restarted_container.py"}

_phase = os.environ.get(PHASE_ENV, "")
if os.environ.get(TARGET_ENV) and _phase in PHASE_MODULES:
    collect_ignore = [m for p, m in PHASE_MODULES.items() if p != _phase]
else:
    collect_ignore_glob = ["test_*.py"]

#: Deadline of one RPC: generous, it only turns a hang into a failure.
CALL_TIMEOUT_S = 30.0
#: Where the image keeps its data (the volume); the server reports it as each partition's log dir.
DATA_DIR = "/var/lib/stratalog"


@dataclass(frozen=True)
class Dataset:
    """The records the ``first`` phase writes and both phases read back.

    ``events``: ``partitions`` partitions written with Produce, batch by batch, each batch
    compressed with the next codec of :data:`COMPRESSIONS`. Partition 0 holds incompressible
    2 KiB values, enough for several 1 MiB segments; the others hold small records.
    ``keyed``: written with the Producer (murmur2 partitioning), read back with the Consumer.
    """

    events_topic: str = "docker-events"
    partitions: int = 3
    batch_records: int = 50
    t0_ms: int = 1_700_000_000_000
    segment_bytes: int = 1024 * 1024
    keyed_topic: str = "docker-keyed"
    keyed_partitions: int = 2
    keyed_records: int = 300
    keyed_keys: int = 12
    #: Written by kafka-python through the Kafka listener: values v0..v{kafka_records - 1}.
    kafka_topic: str = "docker-kafka"
    kafka_records: int = 20

    def batch_count(self, partition: int) -> int:
        return 26 if partition == 0 else 8

    def record_count(self, partition: int) -> int:
        return self.batch_count(partition) * self.batch_records

    def timestamp_ms(self, offset: int) -> int:
        """Record ``offset``'s timestamp in every partition: strictly increasing, 10 ms apart."""
        return self.t0_ms + 10 * offset

    def records(self, partition: int) -> list[ProducerRecord]:
        """Every record of ``events`` partition ``partition``, in offset order."""
        rng = random.Random(f"stratalog-docker-test/{partition}")
        records = []
        for offset in range(self.record_count(partition)):
            size = 2048 if partition == 0 else 20 + offset % 90
            value = None if offset % 97 == 13 else rng.randbytes(size)  # a few tombstones
            key = None if offset % 7 == 3 else b"p%d-key-%d" % (partition, offset % 31)
            headers = (("n", b"%d" % offset), ("none", None)) if offset % 5 == 0 else ()
            records.append(ProducerRecord(value, key, self.timestamp_ms(offset), headers))
        return records

    def batches(self, partition: int) -> Iterator[tuple[Compression, list[ProducerRecord]]]:
        """The Produce requests that write ``partition``: (compression, records) in order."""
        records = self.records(partition)
        for i in range(self.batch_count(partition)):
            chunk = records[i * self.batch_records : (i + 1) * self.batch_records]
            yield COMPRESSIONS[(i + partition) % len(COMPRESSIONS)], chunk

    def expected(self, partition: int) -> list[tuple[object, ...]]:
        """What fetching ``partition`` must give, comparable with :meth:`observed`."""
        return [
            (offset, r.timestamp_ms, r.key, r.value, tuple(r.headers))
            for offset, r in enumerate(self.records(partition))
        ]

    @staticmethod
    def observed(records: list[ConsumerRecord]) -> list[tuple[object, ...]]:
        """Fetched records in the form of :meth:`expected`."""
        return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]

    def keyed(self) -> list[tuple[bytes, bytes]]:
        """The (key, value) pairs of ``keyed``, in send order."""
        return [
            (b"user-%d" % (i % self.keyed_keys), b"event-%d" % i)
            for i in range(self.keyed_records)
        ]


COMPRESSIONS = (
    Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD,
)


@pytest.fixture(scope="session")
def target() -> str:
    return os.environ[TARGET_ENV]


@pytest.fixture(scope="session")
def metrics_url() -> str:
    url = os.environ.get(METRICS_URL_ENV)
    if not url:
        pytest.fail(f"{METRICS_URL_ENV} is not set: deploy/docker-test.sh sets it")
    return url


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    address = os.environ.get(KAFKA_ENV)
    if not address:
        pytest.fail(f"{KAFKA_ENV} is not set: deploy/docker-test.sh sets it")
    return address


@pytest.fixture(scope="session")
def dataset() -> Dataset:
    return Dataset()


def _read_partition(client: SyncClient, topic: str, partition: int) -> list[ConsumerRecord]:
    """Every record of one partition: FetchByOffset from offset 0 up to the high watermark."""
    first = client.fetch_by_offset(topic, partition, 0)
    records = list(first.records)
    high_watermark, offset = first.high_watermark, first.next_offset
    while offset < high_watermark:
        result = client.fetch_by_offset(topic, partition, offset)
        assert result.next_offset > offset, f"fetch at {offset} of {topic}/{partition} is stuck"
        records.extend(result.records)
        offset = result.next_offset
    return records


@pytest.fixture(scope="session")
def read_partition() -> Callable[[SyncClient, str, int], list[ConsumerRecord]]:
    """``read_partition(client, topic, partition)``: every record of the partition, in order."""
    return _read_partition


@pytest.fixture(scope="module")
def client(target: str) -> Iterator[SyncClient]:
    with SyncClient(target, timeout_s=CALL_TIMEOUT_S) as client:
        client.wait_ready(CALL_TIMEOUT_S)
        yield client
