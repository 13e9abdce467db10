"""Issue 24, finding 5, against real server processes: the metrics port and the descriptors.

The probe held 2,048 idle connections to the metrics port of a server whose endpoint started a
thread per connection with no cap and no idle timeout: produces failed STORAGE_ERROR, a
partition went offline after a roll failed with EMFILE, and stayed offline after the attacker
left. Here:

* 2,048 idle connections: produce (every one rolls a segment) and fetch keep working, the
  endpoint holds at most its cap (the rest are closed as they come), no thread is started per
  connection, the descriptors and the resident size stay within the cap's budget
  (docs/server.md, "What a client can make the server hold"), and the idle ones are closed
  after the idle timeout;
* a partition whose roll found no descriptor free (a server whose operator reserved none for
  the rest of the process, ``log.descriptors.reserved=0``, and connections filling the caps)
  refuses those appends as retriable, stays online, and rolls once the connections are gone;
* /metrics with ``metrics_authentication = "required"``: refused without credentials, served
  with them.

Waits are on conditions (the server's descriptors, its metrics, a socket it closed), never
sleeps; every loop is bounded in count and time.
"""

from __future__ import annotations

import base64
import os
import re
import resource
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from stratalog.client.errors import from_rpc_error
from stratalog.records import build_batch
from stratalog.server.security.credentials import CredentialFile
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, ServerProcess, until

T0 = 1_700_000_000_000
#: make test runs this module in its serial phase: it measures the server's resident size,
#: descriptors and threads, which the parallel phase's load would disturb.
pytestmark = pytest.mark.serial

#: The probe's count of idle connections.
IDLE_CONNECTIONS = 2048
#: The metrics endpoint's cap and idle timeout in these servers.
METRICS_CAP = 64
IDLE_MS = 5000
#: What the server may hold beyond its baseline for the cap's connections, per connection:
#: the socket's descriptor and buffers, the stream reader and writer, the task (docs/server.md's
#: row: a few KiB measured, 64 KiB budgeted) ...
CONNECTION_BUDGET_BYTES = 64 * 1024
#: ... plus a fixed margin for what the produces and fetches beside them allocate.
RSS_MARGIN_BYTES = 16 << 20


def _rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert match, status
    return int(match.group(1)) * 1024


async def _settled_rss_bytes(pid: int) -> int:
    """The server's RSS once it stopped growing by itself (the log cleaner touches its dedupe
    buffer, some 90 MiB, in its first second): three readings 200 ms apart within 1 MiB."""
    readings = [_rss_bytes(pid)]

    def settled() -> bool:
        readings.append(_rss_bytes(pid))
        return len(readings) >= 3 and max(readings[-3:]) - min(readings[-3:]) < 1 << 20

    await until(settled, "the server's RSS settled", timeout_s=60)
    return readings[-1]


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^Threads:\s+(\d+)$", status, re.MULTILINE)
    assert match, status
    return int(match.group(1))


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _nofile(limit: int) -> dict[int, tuple[int, int]]:
    return {resource.RLIMIT_NOFILE: (limit, limit)}


def _produce(stub: broker_pb2_grpc.BrokerStub, topic: str, index: int) -> pb.ProduceResponse:
    batch = build_batch([(T0 + index, None, b"v%04d" % index, ())])
    return stub.Produce(pb.ProduceRequest(topic=topic, record_batches=batch),
                        timeout=CALL_TIMEOUT_S)


def _values(stub: broker_pb2_grpc.BrokerStub, topic: str, count: int) -> list[bytes]:
    values: list[bytes] = []
    offset = 0
    for _ in range(count + 1):  # one record per segment: a fetch may return one
        if offset >= count:
            break
        fetched = stub.FetchByOffset(pb.FetchByOffsetRequest(topic=topic, offset=offset),
                                     timeout=CALL_TIMEOUT_S)
        values += [record.value for record in fetched.records]
        offset = fetched.records[-1].offset + 1 if fetched.records else count
    return values


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset), without waiting (a peek: no select,
    whose descriptor set stops at 1,024)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _connect_many(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sockets.append(socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT_S))
    return sockets


async def test_2048_idle_metrics_connections_take_nothing_the_data_path_needs(
    start_server, tmp_path: Path
) -> None:
    server: ServerProcess = start_server(
        tmp_path / "data",
        "--metrics-connections-max", str(METRICS_CAP),
        "--metrics-connections-max-idle-ms", str(IDLE_MS),
        # The probe's limit: RLIMIT_NOFILE 2,048 holds 1,024 + 64 connections, 512 reserved,
        # and 80 partitions beside them.
        rlimits=_nofile(2048),
    )
    pid = server.process.pid
    assert server.metrics_port is not None
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="busy", partitions=1,
                                               configs={"segment.bytes": "100"}),
                         timeout=CALL_TIMEOUT_S)
        _produce(stub, "busy", 0)
        baseline_descriptors = _descriptors(pid)
        baseline_threads = _threads(pid)
        baseline_rss = await _settled_rss_bytes(pid)
        peaks = {"descriptors": 0, "threads": 0, "rss": 0}

        def sample() -> None:
            peaks["descriptors"] = max(peaks["descriptors"], _descriptors(pid))
            peaks["threads"] = max(peaks["threads"], _threads(pid))
            peaks["rss"] = max(peaks["rss"], _rss_bytes(pid))

        started = time.monotonic()
        attackers = _connect_many(server.metrics_port, IDLE_CONNECTIONS)
        try:
            # The cap's worth are held; every other one is closed as it is accepted.
            await until(lambda: sample() or sum(map(_closed_by_server, attackers))
                        >= IDLE_CONNECTIONS - METRICS_CAP,
                        "the connections over the cap closed by the server", timeout_s=60)
            # The data path, as in the probe's 14 produces (each one rolls a segment).
            for index in range(1, 15):
                assert _produce(stub, "busy", index).base_offset == index
                sample()
            assert _values(stub, "busy", 15) == [b"v%04d" % i for i in range(15)]
            topic = stub.DescribeTopic(pb.DescribeTopicRequest(name="busy"),
                                       timeout=CALL_TIMEOUT_S).topic
            assert topic.partitions[0].segment_count == 15
            # The idle ones go after the idle timeout.
            await until(lambda: sample() or all(map(_closed_by_server, attackers)),
                        "every idle connection closed by the server", timeout_s=60)
            assert time.monotonic() - started >= IDLE_MS / 1000
            # The cap's connections were held (the peak saw them) and nothing more: no thread
            # per connection, their descriptors and memory within the cap's budget.
            assert baseline_descriptors + METRICS_CAP // 2 <= peaks["descriptors"] \
                <= baseline_descriptors + METRICS_CAP + 16, (baseline_descriptors, peaks)
            # (the produces may start an I/O thread or two; a thread per connection is 64)
            assert peaks["threads"] <= baseline_threads + 4, (baseline_threads, peaks)
            assert peaks["rss"] <= baseline_rss + METRICS_CAP * CONNECTION_BUDGET_BYTES \
                + RSS_MARGIN_BYTES, (baseline_rss, peaks)
        finally:
            for sock in attackers:
                sock.close()
        refused_at_cap = server.metric(
            'stratalog_metrics_connections_refused_total{reason="connections_max"}')
        refused_idle = server.metric(
            'stratalog_metrics_connections_refused_total{reason="idle"}')
        # Each connection was either refused at the cap or held until idle (more than the cap
        # when a slow connect loop outlived an idle timeout: freed slots take new ones).
        assert refused_idle >= METRICS_CAP and refused_at_cap > 0
        assert refused_idle + refused_at_cap == IDLE_CONNECTIONS
        assert "is offline" not in server.log_text()
        print(f"\n2,048 idle metrics connections: descriptors {baseline_descriptors} -> "
              f"{peaks['descriptors']} at most, threads {baseline_threads} -> "
              f"{peaks['threads']}, RSS {baseline_rss / 2**20:.1f} -> "
              f"{peaks['rss'] / 2**20:.1f} MiB")
    assert server.stop() == 0


async def test_a_roll_without_a_descriptor_free_is_retried_once_connections_are_gone(
    start_server, tmp_path: Path
) -> None:
    # An operator who left nothing for the rest of the process (log.descriptors.reserved=0):
    # the budget then counts only segments and connections, and connections filling both caps
    # leave the roll no descriptor. As in the probe, but the partition must not go offline.
    # The limit leaves the storage 16 descriptors beside the caps, and the rest of the process
    # (event loop, gRPC's pollers, log files: some 40) has none of its own.
    connections_max, metrics_cap, limit = 300, 300, 616
    server: ServerProcess = start_server(
        tmp_path / "data",
        "--max-connections", str(connections_max),
        "--metrics-connections-max", str(metrics_cap),
        "--set", "log.descriptors.reserved=0",
        rlimits=_nofile(limit),
        kafka_listen="",  # no Kafka listener: its cap would take the descriptors counted here
    )
    pid = server.process.pid
    assert server.metrics_port is not None
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="rolls", partitions=1,
                                               configs={"segment.bytes": "100"}),
                         timeout=CALL_TIMEOUT_S)
        assert _produce(stub, "rolls", 0).base_offset == 0
        # Connections until the server holds every descriptor it may (bounded: both caps).
        hogs: list[socket.socket] = []
        try:
            for port in (server.metrics_port, server.port):
                for _ in range(metrics_cap if port == server.metrics_port else connections_max):
                    if _descriptors(pid) >= limit - 1:
                        break
                    hogs.append(socket.create_connection(("127.0.0.1", port),
                                                         timeout=CALL_TIMEOUT_S))
            await until(lambda: _descriptors(pid) >= limit - 2,
                        "the server's descriptors all taken", timeout_s=60)
            refused = []
            written = 1
            for _ in range(5):
                try:
                    response = _produce(stub, "rolls", written)
                except grpc.RpcError as exc:
                    refused.append(from_rpc_error(exc))
                else:
                    assert response.base_offset == written
                    written += 1
            assert refused, "no append ran out of descriptors"
            for error in refused:
                assert error.reason == "RESOURCE_LIMIT_EXCEEDED" and error.retriable, error
                assert error.metadata["limit"] == "RLIMIT_NOFILE"
                assert "stays online" in str(error) and str(tmp_path) not in str(error)
        finally:
            for sock in hogs:
                sock.close()
        await until(lambda: _descriptors(pid) < limit - 50,
                    "the server's descriptors given back", timeout_s=60)
        # The same partition takes appends again, rolling as before: nothing is offline.
        for _ in range(3):
            assert _produce(stub, "rolls", written).base_offset == written
            written += 1
        assert _values(stub, "rolls", written) == [b"v%04d" % i for i in range(written)]
    log = server.log_text()
    assert "failed for want of a file descriptor (RLIMIT_NOFILE reached)" in log
    assert "is offline" not in log
    assert server.stop() == 0


def _scrape(url: str, authorization: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": authorization} if authorization else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=CALL_TIMEOUT_S) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_metrics_with_authentication_required(start_server, tmp_path: Path) -> None:
    CredentialFile().with_user("prometheus", "scrape-secret", 4096).save(tmp_path / "c.json")
    server: ServerProcess = start_server(
        tmp_path / "data",
        "--authentication-credentials-file", str(tmp_path / "c.json"),
        "--authentication-plaintext-allowed", "true",  # loopback only
        "--metrics-authentication", "required",
    )
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        metadata = (("authorization", _basic("prometheus", "scrape-secret")),)
        stub.CreateTopic(pb.CreateTopicRequest(name="secret-topic-name", partitions=1),
                         timeout=CALL_TIMEOUT_S, metadata=metadata)
        stub.Produce(pb.ProduceRequest(topic="secret-topic-name",
                                       record_batches=build_batch([(T0, None, b"v", ())])),
                     timeout=CALL_TIMEOUT_S, metadata=metadata)
    status, body = _scrape(server.metrics_url)
    assert status == 401 and "secret-topic-name" not in body and "stratalog_" not in body
    status, body = _scrape(server.metrics_url, _basic("prometheus", "wrong"))
    assert status == 401 and "secret-topic-name" not in body
    status, body = _scrape(server.metrics_url, _basic("prometheus", "scrape-secret"))
    assert status == 200 and 'records_in_total{topic="secret-topic-name"} 1.0' in body
    assert 'stratalog_metrics_connections_refused_total{reason="unauthenticated"} 2.0' in body
    assert server.stop() == 0


def test_metrics_authentication_without_a_way_to_authenticate_is_refused_at_start(
    start_server, tmp_path: Path
) -> None:
    with pytest.raises(AssertionError, match="no scrape could show who it is"):
        start_server(tmp_path / "data", "--metrics-authentication", "required")


def test_tls_scrapes_on_new_connections_all_get_their_answer(
    start_server, pki, tmp_path: Path
) -> None:
    # Each connection's handshake starts with the context of that moment; a ClientHello that
    # came before the handshake took the socket over was once lost, and the scrape waited for
    # the handshake timeout. Twenty new connections, each answered.
    server: ServerProcess = start_server(
        tmp_path / "data", "--tls-cert-file", str(pki.server[0]),
        "--tls-key-file", str(pki.server[1]), "--metrics-request-timeout-ms", "5000",
    )
    context = ssl.create_default_context(cafile=str(pki.ca))
    url = f"https://localhost:{server.metrics_port}/metrics"
    for _ in range(20):
        with urllib.request.urlopen(url, context=context, timeout=CALL_TIMEOUT_S) as answer:
            assert answer.status == 200 and b"stratalog_build_info" in answer.read()
    with urllib.request.urlopen(url, context=context, timeout=CALL_TIMEOUT_S) as answer:
        text = answer.read().decode()
    assert "stratalog_metrics_connections_refused_total{" not in text.replace(
        "# HELP stratalog_metrics_connections_refused_total", "")
    assert server.stop() == 0


def test_metrics_on_a_host_of_their_own(start_server, tmp_path: Path) -> None:
    # 127.0.0.2 is loopback too on Linux; the gRPC listener stays on 127.0.0.1.
    server: ServerProcess = start_server(tmp_path / "data", "--metrics-host", "127.0.0.2")
    status, body = _scrape(f"http://127.0.0.2:{server.metrics_port}/metrics")
    assert status == 200 and "stratalog_build_info" in body
    with pytest.raises(OSError):
        _scrape(f"http://127.0.0.1:{server.metrics_port}/metrics")
    assert server.stop() == 0
