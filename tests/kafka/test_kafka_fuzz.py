"""Protocol fuzzing of the Kafka listener (issue 28): for every API key it serves, at every
version, valid requests (built from the API's own schema by kafka-python's classes:
kafka_wire.sample_request) and mutations of them are sent on raw sockets to a real server.

Mutations: bits flipped anywhere in the header or body, a length or count field made huge,
negative or zero, bytes inserted or deleted, the body cut short, an unknown API key, a version
outside the served range, random bytes; each with a size prefix that matches. Frames whose
prefix does not match go separately: a prefix above ``kafka_request_bytes_max`` or below a
header's size (the server closes at once), and a prefix announcing more than is sent (a
half-sent frame: the client closes).

Each matched frame is followed on its connection by an ApiVersions v0 request, the sentinel: the
server must either answer the sentinel (it served or refused the frame before it, in order) or
close the connection (a frame that is not Kafka's); never hang. After each API's batch the
server is still up and a librdkafka producer is served; at the end its log names no handler
failure (a request that raised instead of being answered with an error code), its RSS grew by
less than a generous bound, and its request bytes, connections and long polls are back to zero.
A shorter run spreads the same kinds of frames over a three-server cluster (leaders, followers,
topic administration through etcd).
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.api_key import ApiKey

from stratalog.server.kafka import listener  # noqa: F401  (registers the handlers)
from stratalog.server.kafka.apis.registry import SERVED_VERSIONS
from stratalog.server.kafka.codec import REQUEST_CLASSES
from tests.integration.conftest import ServerProcess, wait_until
from tests.kafka.kafka_wire import encode_request, sample_request

#: A request larger than this closes the connection from its prefix (the server's setting).
REQUEST_BYTES_MAX = 1 << 20
#: Valid requests built per API version; each is sent as it is and mutated MUTATIONS times.
SAMPLES_PER_VERSION = 2
MUTATIONS = 4
#: An exchange that takes longer is a hang: the server must answer or close well before.
EXCHANGE_TIMEOUT_S = 15.0
#: RSS growth allowed over the whole run (MiB): generous, it only catches a leak per request.
RSS_GROWTH_MIB_MAX = 200
SENTINEL_CORRELATION_ID = 0x5E471E1
#: What the server logs when a handler raised instead of answering (connection.py,
#: error_codes.py); none may appear.
HANDLER_FAILURES = ("failed; closing the connection", "failed on the server's side",
                    "Traceback")

_SERVED = sorted(SERVED_VERSIONS.items())
_SIZE = struct.Struct(">i")


def _sentinel() -> bytes:
    return encode_request(REQUEST_CLASSES[ApiKey.ApiVersions](), 0, SENTINEL_CORRELATION_ID)


def _framed(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def _read_exactly(sock: socket.socket, count: int) -> bytes | None:
    chunks = []
    while count:
        chunk = sock.recv(count)
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _exchange(server: ServerProcess, frames: bytes) -> str:
    """Send ``frames`` then the sentinel on a new connection: "answered" when the sentinel's
    answer came, "closed" when the server closed the connection first."""
    with socket.create_connection(("127.0.0.1", server.kafka_port),
                                  timeout=EXCHANGE_TIMEOUT_S) as sock:
        try:
            sock.sendall(frames + _sentinel())
            for _ in range(64):
                head = _read_exactly(sock, 4)
                if head is None:
                    return "closed"
                frame = _read_exactly(sock, _SIZE.unpack(head)[0])
                if frame is None:
                    return "closed"
                if _SIZE.unpack_from(frame)[0] == SENTINEL_CORRELATION_ID:
                    return "answered"
        except (ConnectionResetError, BrokenPipeError):
            return "closed"
        except TimeoutError:
            raise AssertionError(
                f"the server neither answered nor closed within {EXCHANGE_TIMEOUT_S} s after"
                f" {frames[:64].hex()}...") from None
    raise AssertionError("more than 64 answers to one frame and the sentinel")


def _send_and_close(server: ServerProcess, data: bytes) -> None:
    with (socket.create_connection(("127.0.0.1", server.kafka_port), timeout=10) as sock,
          contextlib.suppress(ConnectionResetError, BrokenPipeError)):  # closed already
        sock.sendall(data)


def _mutated(body: bytes, rng: random.Random) -> bytes:
    """``body`` (a request frame without its prefix) with one mutation (module docstring)."""
    frame = bytearray(body)
    mutation = rng.choice(["flip", "length", "insert", "delete", "cut", "key", "version",
                           "random"])
    position = rng.randrange(len(frame))
    if mutation == "flip":
        for _ in range(rng.randrange(1, 4)):
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    elif mutation == "length":
        frame[position:position + 4] = rng.choice(
            [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x00",
             b"\xff\xff\xff\x0f", b"\x00\x00\xff\xff"])
    elif mutation == "insert":
        frame[position:position] = rng.randbytes(rng.randrange(1, 9))
    elif mutation == "delete":
        del frame[position:position + rng.randrange(1, 9)]
    elif mutation == "cut":
        del frame[max(position, 10):]
    elif mutation == "key":
        struct.pack_into(">h", frame, 0, rng.choice([-1, 999, 32_767, rng.randrange(100)]))
    elif mutation == "version":
        struct.pack_into(">h", frame, 2, rng.choice([-1, 99, 32_767, rng.randrange(20)]))
    else:
        frame[10:] = rng.randbytes(rng.randrange(0, 200))
    return bytes(frame)


#: The topic a librdkafka producer writes to between batches (created first: the fuzzed
#: server creates no topic from Metadata).
ALIVE_TOPIC = "alive"


def _still_serves(server: ServerProcess) -> None:
    assert server.process.poll() is None, "the server exited"
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    producer.produce(ALIVE_TOPIC, value=b"still here")
    assert producer.flush(30) == 0, "a librdkafka producer was not served after the batch"


@pytest.mark.serial  # reads the server's RSS: other tests' load must not make it noisy
def test_fuzzed_frames_of_every_served_api(start_server):
    server = start_server(
        None, "--kafka-request-bytes-max", str(REQUEST_BYTES_MAX),
        "--fetch-max-wait-ms-max", "100", "--auto-create-topics-enable", "false",
    )
    rng = random.Random(28)
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    admin.create_topics([NewTopic(ALIVE_TOPIC, num_partitions=1)])[ALIVE_TOPIC].result(30)
    del admin  # its connection closes: the count of connections must come back to zero
    _still_serves(server)
    rss_before = _rss_mib(server.process.pid)
    outcomes: Counter[str] = Counter()
    for key, (low, high) in _SERVED:
        for version in range(low, high + 1):
            for sample in range(SAMPLES_PER_VERSION):
                request = sample_request(REQUEST_CLASSES[key], version, rng)
                body = encode_request(request, version, sample + 1)[4:]
                outcomes[_exchange(server, _framed(body))] += 1
                for _ in range(MUTATIONS):
                    outcomes[_exchange(server, _framed(_mutated(body, rng)))] += 1
            # Prefixes that do not match their frames.
            for size in (REQUEST_BYTES_MAX + 1, (1 << 31) - 1, -1, 0, 9):
                assert _exchange(server, _SIZE.pack(size) + body) == "closed", size
            _send_and_close(server, _SIZE.pack(len(body) + rng.randrange(1, 4096)) + body)
            _send_and_close(server, _framed(body)[:rng.randrange(1, len(body) + 4)])
        _still_serves(server)
    # Random frames, any key.
    for _ in range(200):
        outcomes[_exchange(server, _framed(rng.randbytes(rng.randrange(10, 300))))] += 1
    _still_serves(server)
    assert outcomes["answered"] and outcomes["closed"], outcomes
    held: list[float] = []

    def nothing_held() -> bool:
        held[:] = [server.metric("stratalog_kafka_request_bytes"),
                   server.metric("stratalog_kafka_connections"),
                   server.waiting_rpcs("long_poll")]
        return held == [0, 0, 0]

    try:
        wait_until(nothing_held, "request bytes, connections, long polls back to zero", 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: still held {held}") from None
    growth = _rss_mib(server.process.pid) - rss_before
    assert growth < RSS_GROWTH_MIB_MAX, f"RSS grew {growth:.0f} MiB over the fuzzing"
    log = server.log_text()
    failures = [line for line in log.splitlines() if any(f in line for f in HANDLER_FAILURES)]
    assert not failures, "\n".join(failures[:10])


@pytest.mark.serial  # three servers and etcd
def test_fuzzed_frames_in_cluster_mode(start_member):
    """The same frames, fewer of them, spread over the three servers of a cluster: leaders,
    followers and the controller's topic administration (through etcd) meet them; every
    server stays up, serves librdkafka and logs no handler failure."""
    servers = [start_member(node_id, "--fetch-max-wait-ms-max", "100",
                            "--kafka-request-bytes-max", str(REQUEST_BYTES_MAX))
               for node_id in (1, 2, 3)]
    bootstrap = ",".join(server.kafka_bootstrap for server in servers)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # The sample requests' topic names, replicated, so that requests reach real partitions.
    names = [ALIVE_TOPIC, "t", "topic-a", "g"]
    for future in admin.create_topics([NewTopic(n, num_partitions=2) for n in names]).values():
        future.result(60)
    del admin
    rng = random.Random(951)
    outcomes: Counter[str] = Counter()
    for key, (low, high) in _SERVED:
        for version in range(low, high + 1):
            server = servers[rng.randrange(len(servers))]
            request = sample_request(REQUEST_CLASSES[key], version, rng)
            body = encode_request(request, version, 1)[4:]
            outcomes[_exchange(server, _framed(body))] += 1
            for _ in range(2):
                outcomes[_exchange(server, _framed(_mutated(body, rng)))] += 1
    for server in servers:
        _still_serves(server)
    assert outcomes["answered"] and outcomes["closed"], outcomes
    for server in servers:
        log = server.log_text()
        failures = [line for line in log.splitlines()
                    if any(f in line for f in HANDLER_FAILURES)]
        assert not failures, "\n".join(failures[:10])
