"""The Producer against a server that is not there yet, goes away, or never comes: the delivery
timeout decides (issue 15, item 5).

Each test starts its own server processes on a port chosen first (``--listen 127.0.0.1:PORT``),
so that a Producer can be pointed at it before anything listens there. The bounds on time are
loose on purpose: a lower bound (nothing gives up before ``delivery_timeout_ms``) and an upper
bound many times larger (only a hang fails it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from stratalog.client import Client, Consumer, FetchFormat, Producer, errors, partition_for_key
from stratalog.records import iter_batches

from .conftest import free_port, until

TOPIC = "late"
PARTITIONS = 3
#: Far above any delivery timeout below: only a hang reaches it.
HANG_S = 60.0


async def prepared_data_dir(start_server, tmp_path: Path) -> Path:
    """A data directory that holds the topic, its server stopped."""
    data_dir = tmp_path / "data"
    server = await asyncio.to_thread(start_server, data_dir)
    async with Client(server.target) as client:
        await client.create_topic(TOPIC, PARTITIONS)
    assert server.stop() == 0
    return data_dir


async def stored(target: str) -> dict[int, list[bytes]]:
    """The values of every partition of the topic, in offset order."""
    async with Client(target) as client:
        out: dict[int, list[bytes]] = {}
        for partition in range(PARTITIONS):
            async with Consumer(client, TOPIC, partitions=[partition], start="earliest") as c:
                out[partition] = [record.value async for record in c]
        return out


async def stamps(target: str, partition: int) -> list[tuple[int, int, int]]:
    """(producer_id, base_sequence, records) of each stored batch of ``partition``."""
    async with Client(target) as client:
        result = await client.fetch_by_offset(
            TOPIC, partition, 0, max_bytes=64 * 1024 * 1024,
            fetch_format=FetchFormat.RECORD_BATCHES,
        )
    return [
        (header.producer_id, header.base_sequence, header.records_count)
        for header, _ in iter_batches(result.record_batches)
        if not header.is_control
    ]


def expected_by_partition(keys_values: list[tuple[bytes, bytes]]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for key, value in keys_values:
        out[partition_for_key(key, PARTITIONS)].append(value)
    return out


async def test_records_sent_before_the_server_starts_arrive_once_it_does(
    start_server, tmp_path, caplog
) -> None:
    data_dir = await prepared_data_dir(start_server, tmp_path)
    port = free_port()
    sent = [(b"k%d" % (i % 7), b"v%03d" % i) for i in range(60)]
    caplog.set_level(logging.INFO, "stratalog.client.producer")
    async with Producer(f"127.0.0.1:{port}", delivery_timeout_ms=int(HANG_S * 1000)) as producer:

        async def send_all() -> list:
            return [await producer.send(TOPIC, value, key=key) for key, value in sent]

        sending = asyncio.create_task(send_all())
        # The first send waits for the topic's partition count; nothing listens yet.
        await until(lambda: "DescribeTopic failed (attempt 2)" in caplog.text,
                    "two DescribeTopic attempts failed")
        assert not sending.done()
        server = await asyncio.to_thread(
            start_server, data_dir, "--listen", f"127.0.0.1:{port}"
        )
        futures = await asyncio.wait_for(sending, HANG_S)
        metadata = [await asyncio.wait_for(f, HANG_S) for f in futures]
    assert [m.partition for m in metadata] == [partition_for_key(k, PARTITIONS) for k, _ in sent]
    assert await stored(server.target) == expected_by_partition(sent)
    for partition in range(PARTITIONS):
        sequence = 0
        for _, base_sequence, count in await stamps(server.target, partition):
            assert base_sequence == sequence  # one producer id, sequences in order, no gap
            sequence += count


async def test_batches_retried_through_a_restart_are_stored_once_in_order(
    start_server, tmp_path, caplog
) -> None:
    data_dir = await prepared_data_dir(start_server, tmp_path)
    port = free_port()
    listen = ("--listen", f"127.0.0.1:{port}")
    server = await asyncio.to_thread(start_server, data_dir, *listen)
    caplog.set_level(logging.INFO, "stratalog.client.producer")
    first = [(b"k%d" % (i % 5), b"a%03d" % i) for i in range(30)]
    second = [(b"k%d" % (i % 5), b"b%03d" % i) for i in range(30)]
    async with Producer(server.target, delivery_timeout_ms=int(HANG_S * 1000),
                        batch_bytes_max=200) as producer:
        before = [await producer.send(TOPIC, v, key=k) for k, v in first]
        for future in before:
            await asyncio.wait_for(future, HANG_S)
        server.kill()
        after = [await producer.send(TOPIC, v, key=k) for k, v in second]
        await until(lambda: "retrying <batch" in caplog.text, "a batch retried")
        assert not any(f.done() for f in after)
        server = await asyncio.to_thread(start_server, data_dir, *listen)
        for future in after:
            await asyncio.wait_for(future, HANG_S)
    assert await stored(server.target) == expected_by_partition(first + second)


async def test_a_server_that_never_comes_fails_the_first_send_at_the_delivery_timeout() -> None:
    target = f"127.0.0.1:{free_port()}"
    async with Producer(target, delivery_timeout_ms=2000) as producer:
        started = time.monotonic()
        with pytest.raises(errors.DeliveryTimeoutError) as caught:
            await asyncio.wait_for(producer.send(TOPIC, b"never"), HANG_S)
        elapsed_s = time.monotonic() - started
    assert 2.0 <= elapsed_s < HANG_S
    message = str(caught.value)
    assert "delivery_timeout_ms=2000" in message and TOPIC in message and target in message
    assert caught.value.attempts > 1
    assert isinstance(caught.value.last_error, errors.BrokerUnavailableError)
    assert str(caught.value.last_error) in message  # the cause, named


async def test_max_block_ms_bounds_the_first_send_when_shorter() -> None:
    async with Producer(f"127.0.0.1:{free_port()}", max_block_ms=500) as producer:
        with pytest.raises(errors.DeliveryTimeoutError, match="max_block_ms=500"):
            await asyncio.wait_for(producer.send(TOPIC, b"never"), HANG_S)


async def test_a_server_gone_for_good_fails_the_batch_at_the_delivery_timeout(
    start_server, tmp_path
) -> None:
    data_dir = await prepared_data_dir(start_server, tmp_path)
    server = await asyncio.to_thread(start_server, data_dir)
    async with Producer(server.target, delivery_timeout_ms=2000) as producer:
        await asyncio.wait_for(await producer.send(TOPIC, b"first", partition=0), HANG_S)
        server.kill()
        started = time.monotonic()
        future = await producer.send(TOPIC, b"lost", partition=0)
        with pytest.raises(errors.DeliveryTimeoutError) as caught:
            await asyncio.wait_for(future, HANG_S)
        elapsed_s = time.monotonic() - started
    # The batch's clock starts when it is opened, just before ``started`` was read: a little
    # slack below 2 s, none for a backoff that would end it early.
    assert 1.9 <= elapsed_s < HANG_S
    assert "delivery_timeout_ms=2000" in str(caught.value)
    assert caught.value.attempts > 1
    assert isinstance(caught.value.last_error, errors.BrokerUnavailableError)
