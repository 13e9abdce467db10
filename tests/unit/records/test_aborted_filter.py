"""records/aborted_filter.py: Kafka's READ_COMMITTED filter, against a model of transactions.

The model knows every transaction's whole offset range (first batch to marker); the filter sees
only what a fetch response carries: the batches in order from some batch boundary, and the
``(producer id, first offset)`` of the aborted transactions overlapping them. Both must drop the
same batches: every control batch, and the data batches of aborted transactions.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records import (
    AbortedTransactionFilter,
    BatchBuilder,
    ControlRecordType,
    EndTransactionMarker,
    parse_header,
)
from stratalog.records.batch import BatchHeader


@dataclass
class Batch:
    header: BatchHeader
    first_key: bytes | None


def data_batch(offset: int, producer_id: int, count: int, transactional: bool) -> Batch:
    builder = BatchBuilder(base_offset=offset, producer_id=producer_id, producer_epoch=0,
                           base_sequence=0, is_transactional=transactional)
    for _ in range(count):
        builder.append(0, None, b"v", ())
    return Batch(parse_header(builder.build()), None)


def marker_batch(offset: int, producer_id: int, commit: bool) -> Batch:
    marker = EndTransactionMarker(
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, 0)
    builder = BatchBuilder(base_offset=offset, producer_id=producer_id, producer_epoch=0,
                           is_transactional=True, is_control=True)
    builder.append(0, marker.encode_key(), marker.encode_value(), ())
    return Batch(parse_header(builder.build()), marker.encode_key())


def kept(batches: list[Batch], aborted: list[tuple[int, int]]) -> list[int]:
    """Base offsets of the batches the filter keeps."""
    filt = AbortedTransactionFilter(aborted)
    return [b.header.base_offset for b in batches if not filt.skips(b.header, b.first_key)]


def test_kafkas_example_drops_the_aborted_producers_batches_until_its_marker() -> None:
    batches = [
        data_batch(10, 7, 2, True),   # 10-11: 7's aborted transaction
        data_batch(12, 8, 1, True),   # 12: 8's, committed
        data_batch(13, 9, 1, False),  # 13: not transactional
        marker_batch(14, 8, True),
        marker_batch(15, 7, False),
        data_batch(16, 7, 1, True),   # 16: a later transaction of 7
    ]
    assert kept(batches, [(7, 10)]) == [12, 13, 16]
    assert kept(batches, []) == [10, 12, 13, 16]


def test_an_aborted_transaction_starting_later_drops_nothing_before_it() -> None:
    batches = [data_batch(0, 7, 1, True), marker_batch(1, 7, True), data_batch(2, 7, 1, True),
               marker_batch(3, 7, False)]
    assert kept(batches, [(7, 2)]) == [0]


def test_a_control_batch_without_records_is_dropped_and_ends_nothing() -> None:
    empty = BatchBuilder(base_offset=1, producer_id=7, producer_epoch=0, is_transactional=True,
                         is_control=True)
    empty.append(0, EndTransactionMarker(ControlRecordType.ABORT, 0).encode_key(), None, ())
    header = parse_header(empty.build())
    filt = AbortedTransactionFilter([(7, 0)])
    assert filt.skips(data_batch(0, 7, 1, True).header)
    assert filt.skips(header, None)  # no key given: 7 stays aborted
    assert filt.skips(data_batch(2, 7, 1, True).header)


# An event of a history: ("data", producer, records, transactional) or ("end", producer, commit).
_events = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(0, 3), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("end"), st.integers(0, 3), st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(events=_events, start_index=st.integers(0, 60))
def test_the_filter_drops_exactly_what_the_model_says(events, start_index) -> None:
    batches: list[Batch] = []
    open_first: dict[int, int] = {}  # producer -> first offset of its open transaction
    aborted_ranges: list[tuple[int, int, int]] = []  # producer, first offset, marker offset
    in_aborted: set[int] = set()  # base offsets of data batches the model drops
    members: dict[int, list[int]] = {}  # producer -> base offsets of its open transaction
    offset = 0
    for event in events:
        if event[0] == "data":
            _, producer, count, transactional = event
            if not transactional and producer in open_first:
                continue  # storage refuses a plain write inside an open transaction
            batches.append(data_batch(offset, producer, count, transactional))
            if transactional:
                open_first.setdefault(producer, offset)
                members.setdefault(producer, []).append(offset)
            offset += count
        else:
            _, producer, commit = event
            batches.append(marker_batch(offset, producer, commit))
            if producer in open_first:
                first = open_first.pop(producer)
                txn = members.pop(producer)
                if not commit:
                    aborted_ranges.append((producer, first, offset))
                    in_aborted.update(txn)
            offset += 1
    start = batches[start_index].header.base_offset if start_index < len(batches) else offset
    fetched = [b for b in batches if b.header.base_offset >= start]
    # What a READ_COMMITTED fetch from `start` carries: the aborted transactions overlapping it.
    aborted = [(producer, first) for producer, first, last in aborted_ranges if last >= start]
    expected = [b.header.base_offset for b in fetched
                if not b.header.is_control and b.header.base_offset not in in_aborted]
    assert kept(fetched, aborted) == expected
