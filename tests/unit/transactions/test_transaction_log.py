"""The records of __transaction_state: Kafka's TransactionLogKey/Value v0 byte for byte, the
producer id block record, and every decode error (modelled on Kafka's TransactionLogTest)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.transactions.errors import CorruptTransactionLogError
from stratalog.server.transactions.transaction_log import (
    PRODUCER_IDS_KEY_VERSION,
    ProducerIdsKey,
    ProducerIdsValue,
    TransactionKey,
    decode_key,
    decode_producer_ids_value,
    decode_transaction_value,
    encode_producer_ids_key,
    encode_producer_ids_value,
    encode_transaction_key,
    encode_transaction_value,
)
from stratalog.server.transactions.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
)

S = TransactionState


def metadata(state: TransactionState = S.ONGOING, partitions=(("a", 0),), **changes):
    fields = dict(transactional_id="t", producer_id=7, producer_epoch=2, txn_timeout_ms=60000,
                  state=state, partitions=frozenset(partitions), txn_start_timestamp_ms=900,
                  txn_last_update_timestamp_ms=1000)
    fields.update(changes)
    return TransactionMetadata(**fields)


def test_the_worked_example_of_the_module_docstring() -> None:
    assert encode_transaction_key("t").hex() == "0000000174"
    assert encode_transaction_value(metadata()).hex() == (
        "0000" "0000000000000007" "0002" "0000ea60" "01"
        "00000001" "000161" "00000001" "00000000" "00000000000003e8" "0000000000000384"
    )


def test_value_is_kafkas_v0_layout_read_by_an_independent_parser() -> None:
    # Written from Kafka's TransactionLogValue.json (v0: non-flexible), not from our module.
    value = encode_transaction_value(metadata(S.PREPARE_COMMIT, [("b", 3), ("a", 1), ("b", 0)]))
    version, pid, epoch, timeout, status = struct.unpack_from(">hqhib", value, 0)
    position = 17
    (topics,) = struct.unpack_from(">i", value, position)
    position += 4
    found = []
    for _ in range(topics):
        (length,) = struct.unpack_from(">h", value, position)
        topic = value[position + 2:position + 2 + length].decode()
        position += 2 + length
        (count,) = struct.unpack_from(">i", value, position)
        partitions = struct.unpack_from(f">{count}i", value, position + 4)
        position += 4 + 4 * count
        found.append((topic, list(partitions)))
    last_update, start = struct.unpack_from(">qq", value, position)
    assert position + 16 == len(value)
    assert (version, pid, epoch, timeout, status) == (0, 7, 2, 60000, 2)
    assert found == [("a", [1]), ("b", [0, 3])]  # grouped by topic, sorted
    assert (last_update, start) == (1000, 900)


def test_empty_state_writes_a_null_partition_array_as_kafka_does() -> None:
    value = encode_transaction_value(metadata(S.EMPTY, (), txn_start_timestamp_ms=-1))
    assert struct.unpack_from(">i", value, 17) == (-1,)
    assert decode_transaction_value("t", value).partitions == frozenset()


@given(
    state=st.sampled_from([S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT,
                           S.COMPLETE_COMMIT, S.COMPLETE_ABORT]),
    partitions=st.frozensets(st.tuples(st.text("ab._-x", min_size=1, max_size=5),
                                       st.integers(0, 2**31 - 1)), max_size=8),
    transactional_id=st.text(min_size=1, max_size=20),
    producer_id=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, 32767),
)
def test_values_round_trip(state, partitions, transactional_id, producer_id, epoch) -> None:
    if state.is_complete_or_empty:
        partitions = frozenset()
    original = metadata(state, partitions, transactional_id=transactional_id,
                        producer_id=producer_id, producer_epoch=epoch)
    assert decode_key(encode_transaction_key(transactional_id)) == TransactionKey(transactional_id)
    assert decode_transaction_value(transactional_id, encode_transaction_value(original)) == original


def test_producer_ids_record_round_trips() -> None:
    assert encode_producer_ids_key() == struct.pack(">h", PRODUCER_IDS_KEY_VERSION)
    assert decode_key(encode_producer_ids_key()) == ProducerIdsKey()
    value = ProducerIdsValue(broker_id=3, broker_epoch=-1, next_producer_id=5000)
    encoded = encode_producer_ids_value(value)
    assert encoded.hex() == "0000" "00000003" "ffffffffffffffff" "0000000000001388"
    assert decode_producer_ids_value(encoded) == value


@pytest.mark.parametrize(("key", "message"), [
    (None, "null key"),
    (b"\x00", "ends at byte 0"),
    (b"\x00\x05\x00\x01t", "unknown key version 5"),
    (b"\x00\x00\x00\x05t", "string of length 5"),
    (b"\x00\x00\x00\x01tX", "1 bytes left"),
    (b"\x00\x00\x00\x01\xff", "not UTF-8"),
])
def test_bad_keys_are_named(key, message) -> None:
    with pytest.raises(CorruptTransactionLogError, match=message):
        decode_key(key)


def _value(**changes) -> bytes:
    return encode_transaction_value(metadata(**changes))


@pytest.mark.parametrize(("value", "message"), [
    (b"\x00\x01" + _value()[2:], "unknown version 1"),
    (_value()[:16] + b"\x06" + _value()[17:], "state 6 cannot be logged"),
    (_value()[:16] + b"\x07" + _value()[17:], "state 7 cannot be logged"),
    (_value()[:16] + b"\x09" + _value()[17:], "state 9 cannot be logged"),
    (_value()[:-1], "more needed"),
    (_value() + b"\x00", "1 bytes left"),
    (_value()[:17] + b"\x7f\xff\xff\xff" + _value()[21:], "array count"),
    (_value()[:17] + b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x01\xff\xff\xff\xff"
     + _value()[-16:], "partition -1"),
    (_value()[:16] + b"\x04" + _value()[17:], "CompleteCommit with 1 partitions"),
])
def test_bad_values_are_named(value, message) -> None:
    with pytest.raises(CorruptTransactionLogError, match=message):
        decode_transaction_value("t", value)


@pytest.mark.parametrize(("value", "message"), [
    (b"\x00\x01" + b"\x00" * 20, "unknown version 1"),
    (b"\x00\x00" + b"\x00" * 12 + b"\xff" * 8, "negative next producer id"),
    (b"\x00\x00" + b"\x00" * 19, "more needed"),
])
def test_bad_producer_ids_values_are_named(value, message) -> None:
    with pytest.raises(CorruptTransactionLogError, match=message):
        decode_producer_ids_value(value)
