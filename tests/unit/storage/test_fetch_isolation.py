"""The cuts of whole batches at a bound (fetch_isolation.py), on real batches.

Through PartitionLog, test_partition_log_replication.py (the high watermark) and
test_partition_log_transactions.py (the LSO, aborted transactions) cover these on a live log;
here the cut's own edges: bounds inside, between and past the batches.
"""

from __future__ import annotations

import pytest

from stratalog.records.builder import build_batch
from stratalog.server.storage.fetch_isolation import IsolationLevel, batches_before_bound
from stratalog.server.storage.segment import FetchedBatches

T0 = 1_700_000_000_000


def _batch(base_offset: int, count: int) -> bytes:
    return build_batch(
        [(T0 + i, None, b"v%d" % i, ()) for i in range(count)], base_offset=base_offset
    )


# Three batches: offsets 10..12, 13..14, 15..18.
BATCHES = [_batch(10, 3), _batch(13, 2), _batch(15, 4)]
FETCHED = FetchedBatches(b"".join(BATCHES), 19, 9)


@pytest.mark.parametrize(
    ("upper_bound", "kept", "next_offset", "records"),
    [
        (19, 3, 19, 9),  # at the end: everything
        (15, 2, 15, 5),  # at a batch boundary
        (14, 2, 15, 5),  # inside a batch: a batch starting below the bound is whole
        (11, 1, 13, 3),
    ],
)
def test_batches_starting_below_the_bound_are_kept_whole(
    upper_bound: int, kept: int, next_offset: int, records: int
) -> None:
    cut = batches_before_bound(FETCHED, 10, upper_bound)
    assert cut == FetchedBatches(b"".join(BATCHES[:kept]), next_offset, records)


@pytest.mark.parametrize("offset", [10, 12])
def test_nothing_below_the_bound_is_empty_at_the_offset_read(offset: int) -> None:
    assert batches_before_bound(FETCHED, offset, offset) == FetchedBatches(b"", offset, 0)
    assert batches_before_bound(FETCHED, offset, 5) == FetchedBatches(b"", offset, 0)


def test_the_isolation_levels_are_kafkas() -> None:
    assert [int(level) for level in IsolationLevel] == [0, 1]
    assert IsolationLevel.READ_COMMITTED.name == "READ_COMMITTED"
