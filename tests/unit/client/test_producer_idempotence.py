"""The idempotent and transactional Producer against the recording broker: what the batches carry,
what the Producer does after each kind of answer, and the argument and state checks.

The recording broker keeps no producer state (it stores what it gets), so these tests check
the Producer's side: stamps, restarts, fatal errors, timeouts. Deduplication and ordering by the
server's sequence checks are tested against the real server (tests/integration/).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from kafka.record.default_records import DefaultRecordBatch

from stratalog.client import Client, Producer, ProducerClosedError, errors
from stratalog.client.transaction_manager import TransactionState, TransactionStateError
from stratalog.records import CorruptRecordError as RecordCorruptError
from stratalog.records import parse_header
from stratalog.server.storage import errors as storage_errors

from .conftest import Failure, RecordingBroker

TS = 1_700_000_000_000


def stamps(broker: RecordingBroker, topic: str, partition: int) -> list[tuple[int, int, int, int]]:
    """(producer_id, epoch, base_sequence, records) of each stored batch, read by kafka-python
    (which checks the CRC, so a restamped header must have its CRC rewritten)."""
    out = []
    for data in broker.logs[(topic, partition)]:
        batch = DefaultRecordBatch(data)
        assert batch.validate_crc()
        header = parse_header(data)
        out.append((batch.producer_id, batch.producer_epoch, batch.base_sequence,
                    header.records_count))
    return out


async def test_batches_carry_the_producer_id_and_consecutive_sequences_per_partition(
    broker,
) -> None:
    servicer, target = broker
    # One in flight: this broker stores batches in the order they arrive, and only the real
    # server's sequence checks put concurrent ones back in order.
    async with Producer(target, batch_bytes_max=400, linger_ms=1000,
                        max_in_flight_per_partition=1) as producer:
        futures = [
            await producer.send("multi", b"%03d" % i + bytes(40), partition=i % 2,
                                timestamp_ms=TS)
            for i in range(200)
        ]
        await producer.flush()
        assert producer.producer_id_and_epoch == (1001, 0)
        assert producer.transaction_state is TransactionState.READY
    for future in futures:
        await future
    assert servicer.init_producer_id_calls == 1  # once, lazily, for every partition
    for partition in (0, 1):
        stored = stamps(servicer, "multi", partition)
        assert len(stored) > 5
        expected_sequence = 0
        for producer_id, epoch, base_sequence, count in stored:
            assert (producer_id, epoch, base_sequence) == (1001, 0, expected_sequence)
            expected_sequence += count
        assert expected_sequence == 100
        assert not any(DefaultRecordBatch(d).is_transactional
                       for d in servicer.logs[("multi", partition)])


async def test_without_idempotence_batches_carry_no_producer(broker) -> None:
    servicer, target = broker
    async with Producer(target, idempotent=False) as producer:
        await (await producer.send("events", b"v"))
        assert producer.transaction_state is None and not producer.idempotent
    assert stamps(servicer, "events", 0) == [(-1, -1, -1, 1)]
    assert servicer.init_producer_id_calls == 0


async def test_unknown_producer_id_restarts_the_sequences_under_a_new_id(broker) -> None:
    # The server lost the producer's state: the batch is restamped (new id, sequence 0, CRC
    # rewritten) and sent again, and so are the later batches not yet acknowledged.
    servicer, target = broker
    servicer.failures.append(
        Failure(storage_errors.UnknownProducerIdError("expired", producer_id=1001)))
    async with Producer(target, batch_bytes_max=200, linger_ms=1000, retry_backoff_ms=1,
                        max_in_flight_per_partition=1) as producer:
        futures = [await producer.send("events", b"%03d" % i + bytes(30)) for i in range(20)]
    assert [(await f).offset for f in futures] == list(range(20))
    stored = stamps(servicer, "events", 0)
    assert servicer.init_producer_id_calls == 2
    assert stored[0][:3] == (1002, 0, 0)  # the refused batch, resent under the new id
    assert all(producer_id == 1002 for producer_id, *_ in stored)
    sequence = 0
    for _, _, base_sequence, count in stored:
        assert base_sequence == sequence
        sequence += count


async def test_a_batch_refused_for_good_fails_and_its_partition_restarts(broker) -> None:
    servicer, target = broker
    servicer.failures.append(Failure(RecordCorruptError("bad crc")))
    async with Producer(target, retry_backoff_ms=1) as producer:
        doomed = [await producer.send("events", b"x") for _ in range(3)]
        await producer.flush()
        later = await producer.send("events", b"y")
        assert (await later).offset == 0  # a failed batch does not stop the Producer
    for future in doomed:
        with pytest.raises(errors.CorruptRecordError):
            await future
    # The sequences 0..2 were never stored: the next batch goes out under a new producer id
    # from sequence 0, instead of leaving a gap the server would refuse.
    assert servicer.init_producer_id_calls == 2
    assert stamps(servicer, "events", 0) == [(1002, 0, 0, 1)]


@pytest.mark.parametrize(
    "error",
    [storage_errors.InvalidProducerEpochError("epoch 0 is older than 1", producer_id=1001)],
)
async def test_fenced_is_fatal_every_record_fails_and_later_sends_raise(broker, error) -> None:
    servicer, target = broker
    servicer.gate = asyncio.Event()
    servicer.failures.append(Failure(error))
    async with Client(target) as client:
        # One in flight: the batches after the refused one are never sent (this broker would
        # store them, having no producer state to judge their epoch by).
        producer = Producer(client, batch_bytes_max=200, linger_ms=0, retry_backoff_ms=1,
                            max_in_flight_per_partition=1)
        futures = [await producer.send("events", bytes(50)) for _ in range(30)]
        servicer.gate.set()
        await producer.flush()
        for future in futures:
            with pytest.raises(errors.InvalidProducerEpochError):
                await future
        assert producer.transaction_state is TransactionState.FATAL_ERROR
        with pytest.raises(errors.InvalidProducerEpochError):
            await producer.send("events", b"late")
        with pytest.raises(errors.InvalidProducerEpochError):
            await producer.send_many("events", [b"late"])
        await producer.close()
    assert servicer.records("events", 0) == 0


async def test_no_producer_id_in_the_delivery_timeout_fails_the_records_saying_why(
    broker,
) -> None:
    servicer, target = broker
    servicer.init_failures.extend([grpc.StatusCode.UNAVAILABLE] * 1000)
    async with Producer(target, delivery_timeout_ms=300, retry_backoff_ms=5,
                        retry_backoff_max_ms=20) as producer:
        future = await producer.send("events", b"v")
        with pytest.raises(errors.DeliveryTimeoutError, match="no producer id yet") as caught:
            await future
    assert caught.value.attempts == 0  # never sent
    assert isinstance(caught.value.last_error, errors.BrokerUnavailableError)
    assert servicer.init_producer_id_calls > 2  # retried, not failed at the first error
    assert servicer.produce_calls == 0


async def test_the_producer_id_is_asked_again_once_it_can_be_had(broker) -> None:
    servicer, target = broker
    servicer.init_failures.extend([grpc.StatusCode.UNAVAILABLE] * 3)
    async with Producer(target, retry_backoff_ms=1) as producer:
        assert (await (await producer.send("events", b"v"))).offset == 0
    assert servicer.init_producer_id_calls == 4
    assert stamps(servicer, "events", 0) == [(1004, 0, 0, 1)]


async def test_a_server_without_init_producer_id_is_named(broker) -> None:
    servicer, target = broker
    servicer.init_failures.append(grpc.StatusCode.UNIMPLEMENTED)
    async with Producer(target) as producer:
        future = await producer.send("events", b"v")
        with pytest.raises(errors.StratalogError, match="idempotent=False"):
            await future
        assert producer.transaction_state is TransactionState.FATAL_ERROR


async def test_transactional_calls_in_the_wrong_state_fail_before_any_rpc(broker) -> None:
    servicer, target = broker
    async with Producer(target, transactional_id="app") as producer:
        with pytest.raises(TransactionStateError, match="send\\(\\) outside a transaction in "
                           "state UNINITIALIZED"):
            await producer.send("events", b"v")
        with pytest.raises(TransactionStateError, match="commit_transaction\\(\\) in state "
                           "UNINITIALIZED"):
            await producer.commit_transaction()
        with pytest.raises(TransactionStateError, match="abort_transaction\\(\\) in state "
                           "UNINITIALIZED"):
            await producer.abort_transaction()
    assert servicer.produce_calls == 0 and servicer.init_producer_id_calls == 0
    async with Producer(target) as producer:
        for call in (producer.begin_transaction, producer.commit_transaction,
                     producer.abort_transaction, producer.init_transactions):
            with pytest.raises(TransactionStateError, match="needs a transactional producer"):
                await call()
        with pytest.raises(TransactionStateError, match="needs a transactional producer"):
            async with producer.transaction():
                pass
    closed = Producer(target, transactional_id="app")
    await closed.close()
    with pytest.raises(ProducerClosedError):
        await closed.begin_transaction()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_in_flight_per_partition": 6}, ValueError, "at most 5 with idempotence"),
        ({"retries": 0}, ValueError, "retries must be > 0 with idempotence"),
        ({"idempotent": "yes"}, TypeError, "idempotent"),
        ({"transactional_id": ""}, ValueError, "transactional_id"),
        ({"transactional_id": 5}, TypeError, "transactional_id"),
        ({"transactional_id": "t", "idempotent": False}, ValueError,
         "idempotent=False cannot go with a transactional_id"),
        ({"transaction_timeout_ms": 1000}, ValueError, "applies to a transactional_id"),
        ({"transactional_id": "t", "transaction_timeout_ms": 0}, ValueError,
         "transaction_timeout_ms"),
        ({"max_block_ms": -1}, ValueError, "max_block_ms"),
        ({"delivery_timeout_ms": 0}, ValueError, "delivery_timeout_ms"),
    ],
)
def test_bad_exactly_once_settings(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        Producer("127.0.0.1:1", **kwargs)


def test_exactly_once_defaults() -> None:
    idempotent = Producer("127.0.0.1:1")
    assert idempotent.idempotent and idempotent.transactional_id is None
    assert idempotent._max_in_flight == 5 and idempotent._retries is None
    plain = Producer("127.0.0.1:1", idempotent=False)
    assert plain._max_in_flight == 1 and plain.transaction_state is None
    Producer("127.0.0.1:1", idempotent=False, max_in_flight_per_partition=50, retries=0)
    transactional = Producer("127.0.0.1:1", transactional_id="t")
    assert transactional.idempotent and transactional.transactional_id == "t"
    assert transactional.transaction_state is TransactionState.UNINITIALIZED
