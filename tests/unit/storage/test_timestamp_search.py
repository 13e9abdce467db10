"""timestamp_search: the first record at or after a timestamp inside one batch, against a
model that decodes every record (moved from test_segment.py with the code)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records.batch import Compression, TimestampType
from stratalog.records.builder import build_batch
from stratalog.records.errors import CorruptRecordError
from stratalog.records.reader import decode_batch_columns
from stratalog.server.storage.time_index import TimestampOffset
from stratalog.server.storage.timestamp_search import first_record_at

T0 = 1_700_000_000_000


@settings(deadline=None)
@given(
    timestamps=st.lists(st.integers(-5, 40), min_size=1, max_size=30),
    target=st.integers(-6, 42),
    starting_offset=st.integers(990, 1040),
    in_order=st.booleans(),
    compression=st.sampled_from([Compression.NONE, Compression.GZIP]),
    timestamp_type=st.sampled_from(list(TimestampType)),
)
def test_first_record_at_is_the_first_in_record_order(
    timestamps: list[int], target: int, starting_offset: int, in_order: bool,
    compression: Compression, timestamp_type: TimestampType,
) -> None:
    # The framing walk against the model: every record decoded, the first that qualifies.
    if in_order:
        timestamps = sorted(timestamps)
    data = build_batch([(T0 + t, None, b"v" * i, ()) for i, t in enumerate(timestamps)],
                       base_offset=1000, compression=compression, timestamp_type=timestamp_type)
    _, columns = decode_batch_columns(data)
    expected = next(
        (TimestampOffset(t, o) for o, t in zip(columns.offsets, columns.timestamps, strict=True)
         if t >= T0 + target and o >= starting_offset),
        None,
    )
    assert first_record_at(data, T0 + target, starting_offset) == expected


def test_first_record_at_refuses_a_damaged_batch() -> None:
    data = build_batch([(T0 + i, None, b"v" * i, ()) for i in range(40)], base_offset=1000)
    for damaged in (data[:-1] + bytes([data[-1] ^ 1]), data[:100]):
        with pytest.raises(CorruptRecordError, match="position 0"):
            first_record_at(damaged, T0, 1000)
