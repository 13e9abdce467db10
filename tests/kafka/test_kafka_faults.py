"""Kafka clients whose connections die mid-request (issue 28): the server stays up and gives
back everything the requests held.

What is watched is the server's own count, on its /metrics: ``stratalog_kafka_request_bytes``
(the bytes of requests read and not yet answered, reserved from
``kafka_queued_request_bytes_max`` as soon as a frame's size prefix is in),
``stratalog_kafka_connections`` and ``stratalog_waiting_rpcs{kind="long_poll"}`` (a Fetch
that waits for records). Each test has a server of its own, so the counts are its alone.
"""

from __future__ import annotations

import socket
import struct
import uuid

from confluent_kafka import Producer
from kafka.protocol.consumer import FetchRequest

from tests.integration.conftest import ServerProcess, wait_until
from tests.kafka.kafka_wire import KafkaWire, ask, encode_request

HALF_SENT_CONNECTIONS = 8
#: The size each half-sent frame announces: reserved whole, as Kafka's memory pool does.
ANNOUNCED_BYTES = 1 << 20
LONG_POLLS = 4


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.kafka_port), timeout=30)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a killed client's kernel may."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _still_serves(server: ServerProcess, topic: str) -> None:
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    producer.produce(topic, value=b"after", partition=0)
    assert producer.flush(30) == 0


def _idle(server: ServerProcess) -> bool:
    return (server.metric("stratalog_kafka_request_bytes") == 0
            and server.metric("stratalog_kafka_connections") == 0
            and server.waiting_rpcs("long_poll") == 0)


def test_half_sent_frames_give_their_reservations_back(start_server):
    server = start_server()
    sockets = []
    for n in range(HALF_SENT_CONNECTIONS):
        sock = _connect(server)
        frame = encode_request(_long_poll(f"half-{n}", 0), 12, 1)
        # The size prefix of a large frame, then the first bytes of a real request.
        sock.sendall(struct.pack(">i", ANNOUNCED_BYTES) + frame[4:40])
        sockets.append(sock)
    wait_until(lambda: server.metric("stratalog_kafka_request_bytes")
               == HALF_SENT_CONNECTIONS * ANNOUNCED_BYTES,
               "every half-sent frame's announced size reserved")
    assert server.metric("stratalog_kafka_connections") == HALF_SENT_CONNECTIONS
    for n, sock in enumerate(sockets):
        if n % 2:
            _reset(sock)
        else:
            sock.close()
    wait_until(lambda: _idle(server), "reservations and connections given back")
    _still_serves(server, f"after-{uuid.uuid4().hex[:6]}")
    assert server.process.poll() is None


def test_connections_waiting_for_a_full_budget_give_up_their_turn(start_server):
    """The budget full of half-sent frames: the next frames wait for room (their connections
    are not read). Two waiting clients go away: their connections, not being read, learn it
    when room frees and they are read again (as Kafka's muted channels), and pass their turn
    on; the holders close, the live waiter's frame is reserved, and once it closes too every
    byte is back and the server serves again."""
    budget_frames = 4
    server = start_server(None, "--kafka-queued-request-bytes-max",
                          str(budget_frames * ANNOUNCED_BYTES))
    holders, waiters = [], []
    for n in range(budget_frames + 3):
        sock = _connect(server)
        sock.sendall(struct.pack(">i", ANNOUNCED_BYTES)
                     + encode_request(_long_poll(f"full-{n}", 0), 12, 1)[4:40])
        (holders if n < budget_frames else waiters).append(sock)
        if n == budget_frames - 1:
            wait_until(lambda: server.metric("stratalog_kafka_request_bytes")
                       == budget_frames * ANNOUNCED_BYTES, "the budget full")
    wait_until(lambda: server.metric("stratalog_kafka_connections") == budget_frames + 3,
               "every connection accepted")
    assert server.metric("stratalog_kafka_request_bytes") == budget_frames * ANNOUNCED_BYTES
    for sock in waiters[:2]:  # waiting for room, then gone
        _reset(sock)
    for sock in holders:
        sock.close()
    # The live waiter takes its turn after the two gone: its announced size alone is held.
    wait_until(lambda: (server.metric("stratalog_kafka_request_bytes") == ANNOUNCED_BYTES
                        and server.metric("stratalog_kafka_connections") == 1),
               "the live waiter's frame reserved, every other connection forgotten")
    waiters[2].close()
    wait_until(lambda: _idle(server), "reservations and connections given back")
    _still_serves(server, f"after-{uuid.uuid4().hex[:6]}")


def _long_poll(topic: str, offset: int) -> FetchRequest:
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20)
    return FetchRequest(replica_id=-1, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[partition])],
                        forgotten_topics_data=[], rack_id="")


def test_a_closed_socket_ends_its_long_poll(start_server):
    server = start_server()
    topic = f"lp-{uuid.uuid4().hex[:8]}"
    _still_serves(server, topic)  # the topic exists, one record at offset 0
    sockets = []
    for _ in range(LONG_POLLS):
        sock = KafkaWire(server.kafka_bootstrap)
        # Waits at the log end for a record that never comes (30 s, the cap).
        sock.sock.sendall(encode_request(_long_poll(topic, 1), 12, 1))
        # A second request queued behind it on the same connection.
        sock.sock.sendall(encode_request(_long_poll(topic, 1), 12, 2))
        sockets.append(sock)
    wait_until(lambda: server.waiting_rpcs("long_poll") == LONG_POLLS,
               "every long poll waiting")
    assert server.metric("stratalog_kafka_request_bytes") > 0
    for n, sock in enumerate(sockets):
        if n % 2:
            _reset(sock.sock)
        else:
            sock.close()
    wait_until(lambda: _idle(server), "long polls, reservations and connections given back")
    _still_serves(server, topic)
    with KafkaWire(server.kafka_bootstrap) as sock:
        fetched = ask(sock, _long_poll(topic, 1), 12).responses[0].partitions[0]
        assert fetched.error_code == 0 and fetched.high_watermark == 2
        assert fetched.records
