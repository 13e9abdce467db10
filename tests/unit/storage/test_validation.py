"""server.storage.validation: the bound on an append's decompressed bytes and the range of
record timestamps (issue 13, defects 2 and 5), and a one-batch append's refusals. The other
checks are exercised through PartitionLog.append in test_partition_log.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stratalog.records.batch import NO_TIMESTAMP, Compression, TimestampType, set_base_offset
from stratalog.records.builder import build_batch
from stratalog.records.errors import (
    DecompressionLimitError,
    InvalidRecordError,
    RecordTooLargeError,
)
from stratalog.records.reader import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    iter_batches,
    summarize_records,
)
from stratalog.server.storage.config import INT64_MAX, INT64_MIN, LogConfig
from stratalog.server.storage.errors import InvalidTimestampError, RecordBatchTooLargeError
from stratalog.server.storage.validation import validate_and_assign_offsets

T0 = 1_700_000_000_000
CONFIG = LogConfig()
MAKE = Callable[[int, int], bytes]


def _validate(data: bytes, config: LogConfig = CONFIG, **kwargs: object):
    return validate_and_assign_offsets(
        data, config, first_offset=0, now_ms=T0, partition_leader_epoch=0,
        **kwargs,  # type: ignore[arg-type]
    )


def _zeros_batch(size_bytes: int, codec: Compression = Compression.ZSTD) -> bytes:
    return build_batch([(T0, None, b"\0" * size_bytes, ())], compression=codec)


# ---------------------------------------------------------------- decompressed bytes per append


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_the_bound_holds_for_all_batches_of_an_append_together(codec: Compression) -> None:
    batch = _zeros_batch(100_000, codec)  # each decompresses to a little over 100 kB
    assert len(batch) < 10_000
    three = batch * 3
    assert _validate(three, decompressed_bytes_max=310_000).record_count == 3
    with pytest.raises(RecordBatchTooLargeError) as caught:
        _validate(three, decompressed_bytes_max=250_000)
    message = str(caught.value)
    # Names the batch, what the batches before it used, the bound and the setting.
    assert "batch 2 at position" in message
    assert "produce_decompressed_bytes_max" in message
    assert "250000" in message
    spent = 2 * summarize_records(batch).records_size_bytes  # the two batches before it
    assert f"after {spent} decompressed bytes" in message
    assert f"more than the {250_000 - spent} bytes left" in message


def test_uncompressed_batches_do_not_spend_the_budget() -> None:
    plain = _zeros_batch(100_000, Compression.NONE)
    assert _validate(plain * 3, decompressed_bytes_max=1000).record_count == 3
    # ... while the compressed batch after them still has the whole budget.
    zstd = _zeros_batch(900)
    assert _validate(plain * 3 + zstd, decompressed_bytes_max=1000).record_count == 4


def test_a_batch_past_the_per_batch_limit_is_the_records_error_without_a_budget() -> None:
    # Without a bound on the append (the log's own appends), each batch keeps the records
    # reader's limit, which a budget above it does not lift either.
    bomb = _zeros_batch(DEFAULT_MAX_DECOMPRESSED_BYTES)
    for bound in (None, 4 * DEFAULT_MAX_DECOMPRESSED_BYTES):
        with pytest.raises(DecompressionLimitError, match="decompression limit"):
            _validate(bomb, decompressed_bytes_max=bound)


def test_a_budget_smaller_than_one_batch_stops_that_batch() -> None:
    with pytest.raises(RecordBatchTooLargeError, match="produce_decompressed_bytes_max"):
        _validate(_zeros_batch(1 << 20), decompressed_bytes_max=4096)


# ---------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    ("base", "delta", "timestamp"),
    [
        (INT64_MIN + 1, -5, INT64_MIN - 4),  # the probe's batch: below int64
        (INT64_MAX - 1, 5, INT64_MAX + 4),  # the probe's other batch: above int64
        (0, -5, -5),  # negative: Kafka writes none but -1
        (-1, -1, -2),
    ],
)
def test_a_record_timestamp_outside_minus_one_and_int64_is_refused(
    batch_with_timestamp_delta: MAKE, base: int, delta: int, timestamp: int
) -> None:
    batch = batch_with_timestamp_delta(base, delta)
    with pytest.raises(InvalidTimestampError) as caught:
        _validate(batch)
    message = str(caught.value)
    assert "offset delta 0" in message
    assert f"has timestamp {timestamp}" in message
    assert f"0..{INT64_MAX}" in message


@pytest.mark.parametrize(
    ("base", "delta"),
    [(5, -6), (INT64_MAX - 5, 5), (0, 0), (-1, 0), (-1, 5)],
)
def test_timestamps_of_minus_one_and_int64_are_accepted(
    batch_with_timestamp_delta: MAKE, base: int, delta: int
) -> None:
    validated = _validate(batch_with_timestamp_delta(base, delta))
    stored = validated.records
    [(header, [record])] = list(iter_batches(stored))
    assert record.timestamp == base + delta
    assert header.max_timestamp == max(base + delta, NO_TIMESTAMP)


def test_a_log_append_time_topic_ignores_the_records_timestamps(
    batch_with_timestamp_delta: MAKE,
) -> None:
    # The log stamps the batch: every record reads as the append time.
    config = LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    validated = _validate(batch_with_timestamp_delta(INT64_MAX - 1, 5), config)
    [(_, [record])] = list(iter_batches(validated.records))
    assert record.timestamp == T0


def test_a_negative_log_append_time_claimed_by_a_batch_is_refused() -> None:
    batch = build_batch(
        [(-5, None, b"v", ())], timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    with pytest.raises(InvalidTimestampError, match="LogAppendTime timestamp -5"):
        _validate(batch)


# ---------------------------------------------------------------- one batch, the common append


def test_one_batch_is_refused_with_the_message_of_the_walk() -> None:
    """An append of one batch takes the one-call path (single_batch_header); a batch it
    cannot take (a base offset, a size) goes on to the walk, which names the same fault as
    for a batch among several."""
    batch = build_batch([(T0, None, b"x" * 200, ())])
    validated = _validate(batch)
    assert (validated.batch_count, validated.headers[0].position) == (1, 0)
    assert validated.headers[0].end_position == len(batch)
    moved = bytearray(batch)
    set_base_offset(moved, 0, 5)
    with pytest.raises(InvalidRecordError, match=(
        "batch 0 at position 0: the base offset of a client batch must be 0, but it is 5"
    )):
        _validate(bytes(moved))
    small = LogConfig.from_mapping({"max.message.bytes": str(len(batch) - 1)})
    with pytest.raises(RecordTooLargeError, match=(
        f"batch 0 at position 0 is {len(batch)} bytes, which exceeds the maximum configured "
        f"value of max.message.bytes \\({len(batch) - 1}\\)"
    )):
        _validate(batch, small)
    assert _validate(batch, LogConfig.from_mapping(
        {"max.message.bytes": str(len(batch))})).record_count == 1
