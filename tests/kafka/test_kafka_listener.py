"""The Kafka listener's address: a port someone chose must be free (the start fails before the
logs open, naming it); the default one gives way to a free one when taken (issue 28)."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.conftest import free_port


def test_a_kafka_port_in_use_fails_the_start_naming_it(start_server, tmp_path):
    port = free_port()
    first = start_server(tmp_path / "a", "--kafka-listen", f"127.0.0.1:{port}")
    assert first.kafka_port == port
    with pytest.raises(AssertionError, match="exited with 1 before serving") as failed:
        start_server(tmp_path / "b", "--kafka-listen", f"127.0.0.1:{port}")
    assert f"port {port} (the Kafka port, kafka_listen) is already in use" in str(failed.value)
    assert not (tmp_path / "b").exists()  # refused before the log directories were made


@pytest.mark.serial  # holds the machine's default Kafka port, 9092
def test_the_default_kafka_port_gives_way_when_taken(start_server, tmp_path):
    holder = socket.socket()
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", 9092))
            holder.listen()
        except OSError:
            pass  # taken already, by another process: just as good
        server = start_server(tmp_path / "data", kafka_listen=None)
        assert server.kafka_port not in (None, 9092)
        assert "the default Kafka port 9092 is in use" in server.log_text()
        # Metadata names the port bound, so clients follow it.
        admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
        [broker] = admin.list_topics(timeout=10).brokers.values()
        assert broker.port == server.kafka_port
    finally:
        holder.close()


def test_an_empty_kafka_listen_turns_the_listener_off(start_server, tmp_path):
    server = start_server(tmp_path / "data", kafka_listen="")
    assert server.kafka_port is None
    assert "Kafka" not in server.log_text().split("serving on", 1)[1].split("\n", 1)[0]
