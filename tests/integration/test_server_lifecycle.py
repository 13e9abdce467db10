"""The server process: health, reflection, metrics, settings, SIGTERM, SIGKILL and restart."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from stratalog.records import build_batch
from stratalog.records.reader import iter_batches
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import wait_until

T0 = 1_700_000_000_000
TIMEOUT = 30


def _stub(target: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def test_health_check_serving(channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "stratalog.v1.Broker"):
        response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as caught:
        health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_the_service_and_its_file(channel) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="stratalog.v1.Broker"),
    ]
    listed, described = reflection.ServerReflectionInfo(iter(requests), timeout=TIMEOUT)
    names = {s.name for s in listed.list_services_response.service}
    assert {"stratalog.v1.Broker", "grpc.health.v1.Health"} <= names
    files = described.file_descriptor_response.file_descriptor_proto
    assert any(b"stratalog/v1/broker.proto" in f for f in files)


def test_metrics_endpoint_serves_text(server, stub) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(name="lc-metrics", partitions=2), timeout=TIMEOUT)
    batch = build_batch([(T0, None, b"x" * 50, ())] * 4)
    stub.Produce(pb.ProduceRequest(topic="lc-metrics", partition=1, record_batches=batch),
                 timeout=TIMEOUT)
    stub.FetchByOffset(pb.FetchByOffsetRequest(topic="lc-metrics", partition=1, offset=0),
                       timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while True:  # log sizes are refreshed by the maintenance pass (every second by default)
        with urllib.request.urlopen(server.metrics_url, timeout=TIMEOUT) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            text = response.read().decode()
        size = re.search(
            r'^stratalog_log_size_bytes\{partition="1",topic="lc-metrics"\} (\S+)$', text, re.M)
        if size is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert size is not None and float(size.group(1)) == len(batch)
    assert 'stratalog_records_in_total{topic="lc-metrics"} 4.0' in text
    assert f'stratalog_bytes_in_total{{topic="lc-metrics"}} {float(len(batch))}' in text
    assert 'stratalog_records_out_total{topic="lc-metrics"} 4.0' in text
    assert re.search(r'^stratalog_requests_total\{code="OK",rpc="Produce"\} [1-9]', text, re.M)
    assert re.search(r'^stratalog_request_duration_seconds_count\{rpc="FetchByOffset"\} [1-9]',
                     text, re.M)
    assert re.search(r'^stratalog_log_end_offset\{partition="1",topic="lc-metrics"\} 4\.0$',
                     text, re.M)
    assert "process_resident_memory_bytes" in text


def test_the_start_logs_a_short_banner_and_the_settings_only_at_debug(
        start_server, tmp_path: Path) -> None:
    """Issue 25 item 13: every start logged ~66 `INFO setting X = ...` lines and nothing said
    what was secured. The banner says the version, the listeners, the data and what is secured,
    and where every setting is."""
    import stratalog

    server = start_server(tmp_path / "data")
    log = server.log_text()
    assert not re.search(r" INFO \S+: setting ", log), log[-4000:]
    banner = [line.split(": ", 1)[1] for line in log.splitlines()
              if " INFO stratalog.server.app: " in line][-5:]
    assert banner[0] == (f"stratalog {stratalog.__version__} serving on {server.target} "
                         f"(gRPC, plaintext), {server.kafka_bootstrap} (Kafka, plaintext); "
                         f"metrics on {server.metrics_url}"), banner
    assert banner[1].startswith(f"data: {(tmp_path / 'data').resolve()} (0 topics, 0 partitions)")
    assert "leaves room for" in banner[1]
    assert banner[2] == (f"security: NONE: no TLS, no authentication, no authorizer: anyone who "
                         f"reaches {server.target} may do everything (docs/security.md)")
    assert banner[3] == "cluster: none (a single server)"
    assert banner[4].startswith("settings: 4 given (kafka_listen, listen, log_dirs, metrics_port),"
                                " the rest "
                                "defaults; every value: stratalog serve --print-settings")
    assert server.stop(signal.SIGTERM) == 0

    secured = start_server(tmp_path / "data", "--authorizer", "acl",
                           "--super-users", "User:ANONYMOUS", "--log-level", "debug")
    log = secured.log_text()
    assert "DEBUG stratalog.server.app: setting authorizer = 'acl'  (given)" in log
    assert ("security: no TLS, anonymous callers allowed, authorizer acl (1 super user), "
            "metrics authentication none") in log
    assert "shut down cleanly last time" in log
    assert secured.stop(signal.SIGTERM) == 0


def test_a_clean_restart_recovers_no_log_and_a_crash_recovers_the_state_log(
        start_server, tmp_path: Path) -> None:
    """Issue 25 item 16: every clean restart logged ``recovered log
    data/__transaction_state-0: 1 segments rebuilt``. The coordinator's state log now opens as
    clean when its directory's clean-shutdown marker was there; after a kill -9 it is still
    recovered (the same log line, so the check below is the one that would have caught it)."""
    data_dir = tmp_path / "data"
    first = start_server(data_dir)
    channel, stub = _stub(first.target)
    with channel:
        stub.CreateTopic(pb.CreateTopicRequest(name="lc-clean", partitions=1), timeout=TIMEOUT)
        batch = build_batch([(T0, None, b"v", ())])
        stub.Produce(pb.ProduceRequest(topic="lc-clean", record_batches=batch), timeout=TIMEOUT)
        # A transactional id: the state log then holds a record, not only an empty segment.
        stub.InitProducerId(pb.InitProducerIdRequest(transactional_id="lc-clean-tx",
                                                     transaction_timeout_ms=60_000),
                            timeout=TIMEOUT)
    assert first.stop(signal.SIGTERM) == 0, first.log_text()[-4000:]

    logged = len(first.log_text())
    clean = start_server(data_dir)
    _stub(clean.target)[0].close()
    after_clean_start = clean.log_text()[logged:]
    assert "loaded the transaction state log" in after_clean_start
    assert "recovered log" not in after_clean_start, after_clean_start[-4000:]

    clean.kill()
    logged = len(clean.log_text())
    crashed = start_server(data_dir)
    _stub(crashed.target)[0].close()
    after_crash = crashed.log_text()[logged:]
    assert re.search(r"recovered log \S*__transaction_state-0: 1 segments rebuilt", after_crash), \
        after_crash[-4000:]
    assert crashed.stop(signal.SIGTERM) == 0


def test_sigterm_is_a_clean_shutdown_and_data_survives(start_server, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    channel, stub = _stub(server.target)
    with channel:
        stub.CreateTopic(pb.CreateTopicRequest(name="lc-term", partitions=1), timeout=TIMEOUT)
        batch = build_batch([(T0 + i, None, b"%d" % i, ()) for i in range(100)])
        stub.Produce(pb.ProduceRequest(topic="lc-term", record_batches=batch), timeout=TIMEOUT)
    assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]
    assert (data_dir / ".kafka_cleanshutdown").exists()
    assert not (data_dir / "lc-term-0" / "00000000000000000000.log.deleted").exists()

    again = start_server(data_dir)
    # Loading consumed the marker; it comes back only with the next clean close.
    assert not (data_dir / ".kafka_cleanshutdown").exists()
    channel, stub = _stub(again.target)
    with channel:
        fetched = stub.FetchByOffset(pb.FetchByOffsetRequest(topic="lc-term", offset=0),
                                     timeout=TIMEOUT)
        assert [r.value for r in fetched.records] == [b"%d" % i for i in range(100)]
        configs = stub.DescribeTopic(pb.DescribeTopicRequest(name="lc-term"),
                                     timeout=TIMEOUT).topic.configs
        assert configs["segment.bytes"] == "1073741824"
    assert again.stop(signal.SIGINT) == 0, again.log_text()[-4000:]
    assert (data_dir / ".kafka_cleanshutdown").exists()


def test_sigterm_with_open_streams_and_long_polls(start_server, tmp_path: Path) -> None:
    """Streams and long polls end promptly on SIGTERM; the exit is still clean."""
    server = start_server(tmp_path / "data", "--shutdown-grace-ms", "20000")
    channel, stub = _stub(server.target)
    outcomes: dict[str, object] = {}
    with channel:
        stub.CreateTopic(pb.CreateTopicRequest(name="lc-open", partitions=1), timeout=TIMEOUT)
        stream = stub.Subscribe(pb.SubscribeRequest(topic="lc-open", offset=0), timeout=60)
        poll = stub.FetchByOffset.future(
            pb.FetchByOffsetRequest(topic="lc-open", offset=0, max_wait_ms=30_000), timeout=60)

        def read_stream() -> None:
            try:
                outcomes["stream"] = list(stream)
            except grpc.RpcError as exc:
                outcomes["stream"] = exc.code()

        reader = threading.Thread(target=read_stream)
        reader.start()
        wait_until(lambda: server.waiting_rpcs("subscribe") == 1
                   and server.waiting_rpcs("long_poll") == 1, "the stream and the poll waiting")
        started = time.monotonic()
        assert server.stop(signal.SIGTERM) == 0, server.log_text()[-4000:]
        # Well within the 20 s grace: nothing waited for it.
        assert time.monotonic() - started < 15
        reader.join(TIMEOUT)
        assert outcomes["stream"] == grpc.StatusCode.UNAVAILABLE
        assert list(poll.result().records) == []  # the poll answered (empty) at shutdown
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


def test_sigkill_during_concurrent_produce_loses_no_acknowledged_record(
    start_server, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir, "--set", "log.segment.bytes=65536")
    channel, stub = _stub(server.target)
    acknowledged: dict[int, bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    stub.CreateTopic(pb.CreateTopicRequest(name="lc-crash", partitions=1), timeout=TIMEOUT)

    def produce(worker: int) -> None:
        sequence = 0
        while not stop.is_set():
            values = [b"w%d-s%d-r%d-" % (worker, sequence, r) + bytes(100) for r in range(5)]
            batch = build_batch([(T0 + sequence, None, v, ()) for v in values])
            try:
                response = stub.Produce(
                    pb.ProduceRequest(topic="lc-crash", record_batches=batch), timeout=TIMEOUT)
            except grpc.RpcError:
                return  # the server died: this request was not acknowledged
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return
            with lock:
                for i, value in enumerate(values):
                    acknowledged[response.base_offset + i] = value
            sequence += 1

    workers = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + TIMEOUT
    while len(acknowledged) < 5_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill()  # mid-stream: requests are in flight
    stop.set()
    for worker in workers:
        worker.join(TIMEOUT)
    channel.close()
    assert not errors
    assert len(acknowledged) >= 5_000

    again = start_server(data_dir, "--set", "log.segment.bytes=65536")
    channel, stub = _stub(again.target)
    with channel:
        stored: dict[int, bytes] = {}
        offset = 0
        while True:
            response = stub.FetchByOffset(
                pb.FetchByOffsetRequest(topic="lc-crash", offset=offset,
                                        format=pb.FETCH_FORMAT_RECORD_BATCHES), timeout=TIMEOUT)
            for _, records in iter_batches(response.record_batches):
                stored.update((r.offset, r.value) for r in records)
            if response.next_offset == offset:
                break
            offset = response.next_offset
        end = response.high_watermark
        for offset, value in acknowledged.items():
            assert stored.get(offset) == value, f"acknowledged offset {offset} lost or changed"
        assert sorted(stored) == list(range(end))
        # Appends go on after the recovered end.
        batch = build_batch([(T0, None, b"after", ())])
        response = stub.Produce(pb.ProduceRequest(topic="lc-crash", record_batches=batch),
                                timeout=TIMEOUT)
        assert response.base_offset == end
    assert again.stop() == 0


def test_a_second_server_on_the_same_dir_fails_fast(start_server, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_server(data_dir)
    result = subprocess.run(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
         "--metrics-port", "-1", "--log-dirs", str(data_dir)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert "lock" in result.stderr.lower()
    assert str(data_dir) in result.stderr
    assert first.process.poll() is None  # the first one is unharmed
    assert first.stop() == 0


def test_bad_settings_exit_2_before_touching_the_disk(tmp_path: Path) -> None:
    for flags in (["--max-request-bytes", "lots"], ["--listen", "nowhere"],
                  ["--set", "no_such_setting=1"]):
        result = subprocess.run(
            [sys.executable, "-m", "stratalog.cli", "serve", "--log-dirs",
             str(tmp_path / "data"), *flags],
            capture_output=True, text=True, timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("stratalog serve: ")
    assert not (tmp_path / "data").exists()


def test_a_bad_storage_default_stops_the_start(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
         "--metrics-port", "-1", "--log-dirs", str(tmp_path / "data"),
         "--set", "log.segment.bytes=tiny"],
        capture_output=True, text=True, timeout=60,
    )
    # Checked with the settings by the LogManager's parser (issue 15): a usage error, exit 2,
    # before the log directory is created.
    assert result.returncode == 2, result.stderr
    assert "segment.bytes" in result.stderr and "'tiny'" in result.stderr
    assert not (tmp_path / "data").exists()


def test_serve_keeps_data_in_dot_data_by_default(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "stratalog.cli", "serve", "--listen", "127.0.0.1:0",
         "--metrics-port", "-1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert re.match(r"^stratalog: listening on 127\.0\.0\.1:\d+$", line.strip()), line
        assert (tmp_path / "data" / "meta.properties").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT) == 0
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


def test_address_in_use_fails_the_start(server, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stratalog.server", "--listen", server.target,
         "--metrics-port", "-1", "--log-dirs", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    host, port = server.target.rsplit(":", 1)
    assert f"port {port} is already in use on {host}" in result.stderr
    assert "add_port" not in result.stderr  # gRPC's own line
    # The port is checked first (issue 15): no log dir was created for a server that cannot
    # run. (A bind lost after the check closes what it opened: tests/unit/server/test_app.py.)
    assert not (tmp_path / "data").exists()


def _thread_nice_values(pid: int) -> dict[int, int]:
    """Each thread's nice value, by thread id: field 19 of /proc/PID/task/TID/stat."""
    values = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        # The fields after the command name, which is in parentheses and may hold spaces.
        values[int(task.name)] = int(stat.rsplit(")", 1)[1].split()[16])
    return values


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="thread nice values are per thread, and in /proc, on Linux only")
@pytest.mark.parametrize("io_threads_nice", [10, 0])
def test_the_thread_pool_runs_below_the_event_loop(
    start_server, tmp_path: Path, io_threads_nice: int
) -> None:
    server = start_server(tmp_path / "data", "--io-threads-nice", str(io_threads_nice))
    pid = server.process.pid
    # The nice value the server started with, which its threads inherit.
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    if io_threads_nice and base == 19:
        pytest.skip("the tests run at nice 19 already: no lower priority to give the pool")
    channel, stub = _stub(server.target)
    with channel:
        # Topic admin runs in the pool: it has a thread now.
        stub.CreateTopic(pb.CreateTopicRequest(name="niced", partitions=1), timeout=TIMEOUT)
    values = _thread_nice_values(pid)
    assert values[pid] == base  # the event loop's thread (the main thread)
    niced = [tid for tid, nice in values.items() if nice != base]
    if io_threads_nice:
        # The pool's threads, and only they: gRPC's, the metrics endpoint's and the loop's
        # keep the server's priority.
        assert 1 <= len(niced) <= 8, values  # io_threads' default
        assert {values[tid] for tid in niced} == {min(19, base + io_threads_nice)}, values
    else:
        assert niced == [], values
