"""`stratalog produce` against a one-member cluster (etcd and a server on 127.0.0.1, issues 25
and 29): a transactional produce works as on one server (the member leads every partition of
the transaction state topic, made by the first request), and so does an idempotent one."""

from __future__ import annotations

import os
import subprocess
import sys

from confluent_kafka import Consumer, TopicPartition

from stratalog.client import SyncClient

from .conftest import metadata, wait_for

CLI = [sys.executable, "-m", "stratalog.cli"]


def test_transactional_and_idempotent_produce_in_cluster_mode(start_member) -> None:
    server = start_member(1)
    wait_for(lambda: len(metadata(server).brokers) == 1, "the broker registered")
    with SyncClient(server.target) as client:
        client.create_topic("cli-cluster-txn", 1)
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    result = subprocess.run(
        [*CLI, "produce", "cli-cluster-txn", "--transactional-id", "loader",
         "--target", server.target],
        input=b"a\nb\n", capture_output=True, timeout=120, env=env,
    )
    assert result.returncode == 0, result.stderr
    plain = subprocess.run([*CLI, "produce", "cli-cluster-txn", "--target", server.target],
                           input=b"c\n", capture_output=True, timeout=60, env=env)
    assert plain.returncode == 0, plain.stderr
    # Committed: a read_committed consumer sees the three records (and the marker moved the
    # last stable offset past the transaction).
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "cli-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("cli-cluster-txn", 0, 0)])
    values: list[bytes] = []
    try:
        def read() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            return len(values) >= 3
        wait_for(read, "the three records read_committed")
    finally:
        consumer.close()
    assert values == [b"a", b"b", b"c"]
