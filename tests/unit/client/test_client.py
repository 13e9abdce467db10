"""Client and SyncClient options against the recording broker: TLS, deadlines, message size,
errors as classes. (Every RPC against the real server: tests/integration/test_client_rpcs.py.)"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import grpc
import grpc.aio
import pytest

from stratalog.client import Client, SyncClient, errors
from stratalog.records import build_batch
from stratalog.v1 import broker_pb2_grpc

from .conftest import RecordingBroker


async def test_server_errors_arrive_as_classes(broker) -> None:
    _, target = broker
    async with Client(target) as client:
        with pytest.raises(errors.UnknownTopicOrPartitionError) as caught:
            await client.describe_topic("nope")
    assert not caught.value.retriable
    assert isinstance(caught.value.__cause__, grpc.RpcError)  # the original is kept as cause


async def test_sync_client_errors_arrive_as_classes(broker) -> None:
    _, target = broker

    def call() -> None:  # blocking: runs in a thread while the loop serves the broker
        with SyncClient(target) as client, pytest.raises(errors.UnknownTopicOrPartitionError):
            client.describe_topic("nope")

    await asyncio.to_thread(call)


async def test_deadline_becomes_request_timeout(broker) -> None:
    servicer, target = broker
    servicer.gate = asyncio.Event()  # Produce never answers
    async with Client(target, timeout_s=0.2) as client:
        with pytest.raises(errors.RequestTimeoutError) as caught:
            await client.produce("events", 0, record_batches=build_batch([(0, None, b"v", ())]))
        assert caught.value.retriable
        # The per-call deadline overrides the default one.
        with pytest.raises(errors.RequestTimeoutError):
            await client.produce("events", 0, [b"v"], timeout_s=0.1)
    servicer.gate.set()


async def test_max_message_bytes_limits_what_is_sent(broker) -> None:
    servicer, target = broker
    batch = build_batch([(0, None, bytes(2 * 1024 * 1024), ())])
    async with Client(target, max_message_bytes=1024 * 1024) as small:
        with pytest.raises(errors.StratalogError) as caught:
            await small.produce("events", 0, record_batches=batch)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert servicer.produce_calls == 0
    async with Client(target, max_message_bytes=8 * 1024 * 1024) as large:
        assert (await large.produce("events", 0, record_batches=batch)).record_count == 1


def test_bad_client_arguments() -> None:
    with pytest.raises(TypeError, match="target"):
        SyncClient(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s"):
        SyncClient("127.0.0.1:1", timeout_s=0)
    with pytest.raises(ValueError, match="max_message_bytes"):
        SyncClient("127.0.0.1:1", max_message_bytes=10)


def _self_signed(tmp_path: Path) -> tuple[bytes, bytes]:
    openssl = shutil.which("openssl")
    assert openssl, "the TLS test needs the openssl command (Debian package openssl)"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )
    return (tmp_path / "key.pem").read_bytes(), (tmp_path / "cert.pem").read_bytes()


async def test_tls_channel(tmp_path: Path) -> None:
    key, cert = _self_signed(tmp_path)
    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(RecordingBroker({"secure": 2}), server)
    port = server.add_secure_port(
        "127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)])
    )
    await server.start()
    try:
        target = f"localhost:{port}"
        credentials = grpc.ssl_channel_credentials(root_certificates=cert)
        async with Client(target, credentials=credentials) as client:
            assert (await client.describe_topic("secure")).num_partitions == 2

        def sync_call() -> int:  # blocking: runs in a thread while the loop serves
            with SyncClient(target, credentials=credentials) as sync_client:
                return sync_client.describe_topic("secure").num_partitions

        assert await asyncio.to_thread(sync_call) == 2
        # Plaintext to a TLS port never gets an answer from the servicer: retriable.
        async with Client(target, timeout_s=2) as plain:
            with pytest.raises((errors.BrokerUnavailableError, errors.RequestTimeoutError)):
                await plain.describe_topic("secure")
    finally:
        await server.stop(None)
