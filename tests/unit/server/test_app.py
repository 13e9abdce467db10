"""The Server object in-process: start, serve, maintenance, clean stop, and failed starts."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import grpc
import grpc.aio
import pytest

from stratalog.records import build_batch
from stratalog.server.app import Server, StartupError
from stratalog.server.settings import Settings, load_settings
from stratalog.server.storage.log_manager import LogManager
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc


def _settings(data_dir: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "listen": "127.0.0.1:0", "log_dirs": (str(data_dir),), "metrics_port": -1,
        "kafka_listen": "127.0.0.1:0",
        "maintenance_interval_ms": 20, "io_threads": 2,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


async def test_serves_runs_maintenance_and_stops_cleanly(tmp_path: Path) -> None:
    server = Server(_settings(tmp_path / "d", metrics_port=0))
    await server.start()
    try:
        assert server.port and server.metrics_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.CreateTopic(pb.CreateTopicRequest(name="t", partitions=1))
            batch = build_batch([(1, None, b"v", ())])
            response = await stub.Produce(pb.ProduceRequest(topic="t", record_batches=batch))
            assert response.base_offset == 0
        # The maintenance task refreshes the log gauges after each pass.
        for _ in range(500):
            if b'stratalog_log_end_offset{partition="0",topic="t"} 1.0' in server.metrics.render():
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the maintenance task never refreshed the log metrics")
    finally:
        await server.stop(grace_s=1)
    assert server.log_manager is None
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()
    # The directory is unlocked: another manager opens it and finds the record.
    with LogManager.open([tmp_path / "d"]) as manager:
        assert manager.get_log("t", 0).log_end_offset == 1


async def test_a_locked_log_dir_is_a_startup_error(tmp_path: Path) -> None:
    with LogManager.open([tmp_path / "d"]):
        server = Server(_settings(tmp_path / "d"))
        with pytest.raises(StartupError, match="cannot open the log directories") as caught:
            await server.start()
        assert "lock" in str(caught.value.__cause__).lower()


async def test_a_port_in_use_is_one_line_before_any_log_dir_is_created(tmp_path: Path) -> None:
    # Issue 15: the server created its data directory, then failed on the port with gRPC's
    # own log line. The port is tested first now, and the message is ours.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Server(_settings(tmp_path / "d", listen=f"127.0.0.1:{port}"))
        with pytest.raises(StartupError) as caught:
            await server.start()
    assert str(caught.value) == f"port {port} is already in use on 127.0.0.1"
    assert not (tmp_path / "d").exists()
    assert server.log_manager is None


async def test_a_metrics_port_in_use_is_refused_before_any_log_dir_too(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Server(_settings(tmp_path / "d", metrics_port=port))
        with pytest.raises(StartupError, match=f"port {port} \\(the metrics port\\) is already"):
            await server.start()
    assert not (tmp_path / "d").exists()


# In make test's serial phase: port 9464 is the machine's, and tests/cluster/test_dev_cluster.py's
# servers take it when free; held by one of them in the parallel phase and let go meanwhile, the
# port asked for by name below would be free again.
@pytest.mark.serial
async def test_the_default_metrics_port_taken_gives_way_to_a_free_one(tmp_path: Path) -> None:
    # Issue 25 item 3: a second server on one machine exited because the first held the
    # default metrics port, which nobody had asked for. Port 9464 is held here (or by someone
    # else already: taken either way).
    default = Settings().metrics_port
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):
            taken.bind(("127.0.0.1", default))
            taken.listen()
        defaulted = load_settings(environ={}, overrides={
            "listen": "127.0.0.1:0", "log_dirs": str(tmp_path / "d")})
        assert not defaulted.given("metrics_port")
        server = Server(defaulted)
        await server.start()
        try:
            assert server.metrics_port not in (None, 0, default)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.metrics_port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await reader.read()).startswith(b"HTTP/1.1 200")
            writer.close()
        finally:
            await server.stop(grace_s=1)
        # The same port asked for by name (flag, file or environment) is still refused.
        chosen = load_settings(environ={"STRATALOG_METRICS_PORT": str(default)}, overrides={
            "listen": "127.0.0.1:0", "log_dirs": str(tmp_path / "e")})
        assert chosen.given("metrics_port")
        with pytest.raises(StartupError, match=f"port {default} \\(the metrics port\\)"):
            await Server(chosen).start()
    assert not (tmp_path / "e").exists()


async def test_a_bind_lost_after_the_check_still_closes_the_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:
    # Another process may take the port between the check and gRPC's bind: that bind fails
    # with our message, without gRPC's log line, and what start opened is closed again.
    from stratalog.server import app

    monkeypatch.setattr(app, "check_ports_free", lambda settings: None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Server(_settings(tmp_path / "d", listen=f"127.0.0.1:{port}"))
        with pytest.raises(StartupError, match=f"cannot listen on 127.0.0.1:{port}"):
            await server.start()
    assert "add_port" not in capfd.readouterr().err
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()
    with LogManager.open([tmp_path / "d"]) as manager:
        assert manager.had_clean_shutdown[(tmp_path / "d").resolve()]


def test_what_grpc_writes_during_a_successful_bind_is_written_out(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import os

    from stratalog.server.app import _grpc_log_kept_on_failure

    with _grpc_log_kept_on_failure():
        os.write(2, b"kept\n")
    with pytest.raises(RuntimeError), _grpc_log_kept_on_failure():
        os.write(2, b"dropped\n")
        raise RuntimeError("bind failed")
    err = capfd.readouterr().err
    assert "kept" in err and "dropped" not in err


async def _until_waiting(server: Server, kind: str, count: int) -> None:
    """Until the server's ``stratalog_waiting_rpcs{kind}`` gauge reads ``count``: a long poll
    or a Subscribe stream that reached the server and waits there (bounded at 30 s)."""
    sample = f'stratalog_waiting_rpcs{{kind="{kind}"}} {float(count)}\n'.encode()
    for _ in range(3000):
        if sample in server.metrics.render():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"not within 30 s: {sample!r}")


async def test_stop_ends_subscribe_streams_with_shutting_down(tmp_path: Path) -> None:
    server = Server(_settings(tmp_path / "d"))
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(name="t", partitions=1))
        call = stub.Subscribe(pb.SubscribeRequest(topic="t", offset=0))
        poll = asyncio.ensure_future(stub.FetchByOffset(
            pb.FetchByOffsetRequest(topic="t", offset=0, max_wait_ms=30_000)))
        await _until_waiting(server, "subscribe", 1)  # both are waiting in the server
        await _until_waiting(server, "long_poll", 1)
        await server.stop(grace_s=30)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in (caught.value.details() or "")
        assert list((await poll).records) == []
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()


async def test_a_corrupt_transaction_state_log_is_a_startup_error_that_closes_the_logs(
    tmp_path: Path,
) -> None:
    from stratalog.server.storage.partition_log import PartitionLog

    # A record the coordinator's replay cannot read (an unknown key version), in a batch that
    # is whole and valid: recovery keeps it, and the coordinator must refuse to guess.
    state_dir = tmp_path / "d" / "__transaction_state-0"
    with PartitionLog.open(state_dir) as state_log:
        state_log.append(build_batch([(1, b"\x7f\x7f", b"value", ())]))
    server = Server(_settings(tmp_path / "d"))
    with pytest.raises(StartupError) as caught:
        await server.start()
    message = str(caught.value)
    assert "transaction coordinator's state log (__transaction_state)" in message
    assert "unknown key version" in message and "offset 0" in message
    assert server.log_manager is None and server.coordinator is None
    # The LogManager it had opened was closed cleanly.
    assert (tmp_path / "d" / ".kafka_cleanshutdown").exists()


async def test_a_commit_wakes_a_read_committed_long_poll(tmp_path: Path) -> None:
    server = Server(_settings(tmp_path / "d"))
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.CreateTopic(pb.CreateTopicRequest(name="t", partitions=1))
            producer = await stub.InitProducerId(pb.InitProducerIdRequest(transactional_id="x"))
            ids = {"transactional_id": "x", "producer_id": producer.producer_id,
                   "producer_epoch": producer.producer_epoch}
            await stub.AddPartitionsToTxn(pb.AddPartitionsToTxnRequest(
                **ids, partitions=[pb.TopicPartition(topic="t", partition=0)]))
            await stub.Produce(pb.ProduceRequest(
                topic="t", records=[pb.Record(value=b"v")], producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch, transactional=True))
            poll = asyncio.ensure_future(stub.FetchByOffset(pb.FetchByOffsetRequest(
                topic="t", offset=0, max_wait_ms=30_000,
                isolation_level=pb.READ_COMMITTED)))
            await _until_waiting(server, "long_poll", 1)  # the record is above the LSO
            assert not poll.done()
            await stub.EndTxn(pb.EndTxnRequest(**ids, commit=True))
            response = await poll
            assert [r.value for r in response.records] == [b"v"]
            assert response.last_stable_offset == response.high_watermark == 2
    finally:
        await server.stop(grace_s=1)
    assert server.coordinator is None


@pytest.mark.parametrize("in_reader", [True, False], ids=["in-reader", "task-each"])
async def test_a_session_serves_in_the_readers_step_or_a_task_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_reader: bool
) -> None:
    """Both ways server/rpc/session.py may start a request (SERVE_IN_READER: Python 3.11's, and
    3.12's): answers by id, a long poll not holding up a point read, a Produce that waits."""
    from stratalog.client import Client
    from stratalog.server.rpc import session

    monkeypatch.setattr(session, "SERVE_IN_READER", in_reader)
    server = Server(_settings(tmp_path / "d"))
    await server.start()
    try:
        async with Client(f"127.0.0.1:{server.port}") as client:
            await client.create_topic("t", 1)
            poll = asyncio.ensure_future(client.fetch_by_offset("t", 0, 1, max_wait_ms=30_000))
            await client.produce("t", 0, [b"first"])
            assert (await client.fetch_by_offset("t", 0, 0)).records[0].value == b"first"
            produced = await asyncio.gather(*(client.produce("t", 0, [b"%d" % i])
                                              for i in range(20)))
            assert [p.base_offset for p in produced] == list(range(1, 21))
            assert (await asyncio.wait_for(poll, 30)).records[0].value == b"0"
            assert client.sessions
    finally:
        await server.stop(grace_s=30)
